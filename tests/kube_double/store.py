"""The double's etcd and watch cache: objects by (resource, name) in one
namespace, one resourceVersion counter for all, and a bounded history of
events the watches are served from. A watch from a resourceVersion older
than the history (or than the last `expire_watches` fault) gets the API
server's 410: an ERROR event with a Status "too old resource version"."""
import collections
import copy
import datetime
import threading
import uuid

HISTORY = 2000


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    def __init__(self):
        self.lock = threading.Condition()
        self.rv = 100
        self.objects = {}           # (resource, name) -> object
        self.events = collections.deque(maxlen=HISTORY)   # (rv, resource, type, object)
        self.oldest = self.rv       # a watch from before this is too old
        self.generation = 0         # bumped by end_watches / expire_watches
        self.expire_generation = 0

    def _event(self, resource, typ, obj):
        self.events.append((self.rv, resource, typ, copy.deepcopy(obj)))
        if len(self.events) == HISTORY:
            self.oldest = self.events[0][0]
        self.lock.notify_all()

    def create(self, resource, obj):
        """Store OBJ as new; None when the name exists."""
        with self.lock:
            name = obj["metadata"]["name"]
            if (resource, name) in self.objects:
                return None
            self.rv += 1
            meta = obj["metadata"]
            meta.update(uid=str(uuid.uuid4()), resourceVersion=str(self.rv), creationTimestamp=now_iso())
            self.objects[(resource, name)] = obj
            self._event(resource, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, resource, name):
        with self.lock:
            o = self.objects.get((resource, name))
            return copy.deepcopy(o) if o is not None else None

    def list(self, resource):
        with self.lock:
            return [copy.deepcopy(o) for (r, _), o in sorted(self.objects.items()) if r == resource], str(self.rv)

    def update(self, resource, name, fn):
        """Apply FN to the stored object (in place) under the lock; a MODIFIED
        event when it changed anything. The new copy, or None if gone."""
        with self.lock:
            o = self.objects.get((resource, name))
            if o is None:
                return None
            before = copy.deepcopy(o)
            fn(o)
            if o != before:
                self.rv += 1
                o["metadata"]["resourceVersion"] = str(self.rv)
                self._event(resource, "MODIFIED", o)
            return copy.deepcopy(o)

    def delete(self, resource, name):
        with self.lock:
            o = self.objects.pop((resource, name), None)
            if o is None:
                return None
            self.rv += 1
            o["metadata"]["resourceVersion"] = str(self.rv)
            self._event(resource, "DELETED", o)
            return copy.deepcopy(o)

    def end_watches(self, expire):
        with self.lock:
            self.generation += 1
            if expire:
                self.expire_generation = self.generation
                # compacted now: a watch from any earlier resourceVersion is
                # too old; from the current one (a list's) it is not
                self.oldest = self.rv
            self.lock.notify_all()

    def since(self, resource, rv):
        """Events of RESOURCE after RV: (events, current rv), or None when RV is too old."""
        if rv < self.oldest:
            return None
        return [e for e in self.events if e[0] > rv and e[1] == resource], self.rv
