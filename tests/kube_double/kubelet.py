"""The double's kubelet: each admitted Pod runs for real on the tests' dockerd.

- images are pulled from the registry by digest (imagePullPolicy honoured:
  IfNotPresent skips a pull when dockerd has the reference); an image that
  is not REPO@sha256:HEX is refused with ErrImagePull as THE DOUBLE'S RULE
  (a real kubelet would pull a tag);
- emptyDir volumes are docker volumes, medium Memory a tmpfs of sizeLimit
  bytes (the pod's memory limit without one), shared by the containers;
- Secret volumes are laid out as the kubelet's atomic writer does
  (`..<timestamp>/` holding the items, `..data` -> it, each top-level item
  a link through `..data`), bind-mounted read-only; a missing Secret or key
  holds the pod in ContainerCreating, as a failing mount does;
- the security context: User uid:gid, GroupAdd fsGroup, ReadonlyRootfs,
  CapDrop/CapAdd, no-new-privileges, docker's default seccomp profile for
  RuntimeDefault (Localhost: STATE/seccomp/PATH or CreateContainerError);
  runAsNonRoot without a uid is checked against the image's user;
- resources: Memory (and MemorySwap) = the memory limit, NanoCpus = the cpu
  limit; PidsLimit = the kubelet's podPidsLimit (per container here, per
  pod on a node);
- init containers in order, a native sidecar (restartPolicy Always)
  started before the next; when every regular container has ended the
  sidecars get SIGTERM, in reverse order, and SIGKILL after the grace;
- activeDeadlineSeconds from startTime: every container killed, phase
  Failed, reason DeadlineExceeded; OOMKilled from docker's State.OOMKilled;
- the network: a pod selected by a NetworkPolicy with Egress in its
  policyTypes and no egress rules runs with NetworkMode none (and so has no
  status.podIP: a real pod would have one, unreachable); any other joins the
  double's docker network and reports its IP. This is the double's
  enforcement standing in for a CNI's;
- logs: each container's stdout and stderr, merged in arrival order, kept
  until the pod object is gone (bounded at LOG_MAX bytes, no rotation).
"""
import datetime
import json
import os
import shutil
import threading
import time
from urllib.parse import quote

from dockerapi import DockerError, demux

LOG_MAX = 64 << 20
GONE = object()


def ts():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Log:
    """One container's log: bytes so far, and whether it has ended."""

    def __init__(self):
        self.cv = threading.Condition()
        self.data = bytearray()
        self.done = False

    def append(self, b):
        with self.cv:
            room = LOG_MAX - len(self.data)
            self.data += b[:max(room, 0)]
            self.cv.notify_all()

    def close(self):
        with self.cv:
            self.done = True
            self.cv.notify_all()


class Container:
    def __init__(self, spec, init):
        self.spec = spec
        self.name = spec["name"]
        self.init = init
        self.sidecar = init and spec.get("restartPolicy") == "Always"
        self.cid = None
        self.log = None
        self.state = {"waiting": {"reason": "ContainerCreating"}}
        self.started = False
        self.ended = threading.Event()


class PodRun:
    def __init__(self, kubelet, pod):
        self.k = kubelet
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.pod = pod
        self.spec = pod["spec"]
        self.cv = threading.Condition()
        self.deleting = None          # the grace period, once deleted
        self.containers = [Container(c, True) for c in self.spec.get("initContainers") or []] + \
                          [Container(c, False) for c in self.spec["containers"]]
        self.volumes = []             # docker volume names
        # names on the host carry the uid: a pod of the same name may be made
        # again while the last one is still being cleaned up
        self.key = f"{self.name}-{self.uid[:8]}"
        self.dir = kubelet.state / "pods" / self.key
        self.net = None               # the NetworkMode of the first container
        self.start = None
        self.finished = threading.Event()

    # -------------------------------------------------------------- status
    def _cstatus(self, c):
        s = {"name": c.name, "state": c.state, "lastState": {}, "ready": bool(c.started and "running" in c.state),
             "restartCount": 0, "image": c.spec.get("image", ""), "imageID": "",
             "started": bool(c.started and "running" in c.state)}
        if c.cid:
            s["containerID"] = "docker://" + c.cid
        return s

    def publish(self, phase=None, reason=None, message=None, scheduled=True, pod_ip=None):
        def fn(o):
            st = o.setdefault("status", {})
            if phase:
                st["phase"] = phase
            if reason:
                st["reason"] = reason
            if message:
                st["message"] = message
            st["qosClass"] = "Guaranteed"
            if self.start:
                st["startTime"] = self.start
                st["hostIP"] = "127.0.0.1"
                st["hostIPs"] = [{"ip": "127.0.0.1"}]
            if pod_ip:
                st["podIP"] = pod_ip
                st["podIPs"] = [{"ip": pod_ip}]
            inits = [self._cstatus(c) for c in self.containers if c.init]
            if self.start:
                if inits:
                    st["initContainerStatuses"] = inits
                st["containerStatuses"] = [self._cstatus(c) for c in self.containers if not c.init]
            regular = [c for c in self.containers if not c.init]
            ready = all(c.started and "running" in c.state for c in regular)
            initialized = all(c.started for c in self.containers if c.init)
            conds = [{"type": "PodScheduled", "status": "True" if scheduled else "False"}]
            if not scheduled:
                conds[0].update(reason="Unschedulable", message="0/1 nodes are available: 1 node(s) were unschedulable. "
                                "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
            elif self.start:
                conds += [{"type": "Initialized", "status": "True" if initialized else "False"},
                          {"type": "ContainersReady", "status": "True" if ready else "False"},
                          {"type": "Ready", "status": "True" if ready else "False"}]
            for c in conds:
                c.setdefault("lastProbeTime", None)
                c.setdefault("lastTransitionTime", ts())
            old = {c["type"]: c for c in st.get("conditions", [])}
            for c in conds:     # keep a condition's transition time while its status holds
                if c["type"] in old and old[c["type"]]["status"] == c["status"]:
                    c["lastTransitionTime"] = old[c["type"]]["lastTransitionTime"]
            st["conditions"] = conds
        return self.k.store.update("pods", self.name, fn)

    # -------------------------------------------------------------- waits
    def wait(self, secs):
        """Sleep up to SECS; False when the pod is being deleted or past its deadline."""
        with self.cv:
            if self.deleting is None:
                self.cv.wait(secs)
        return self.deleting is None and not self.past_deadline()

    def past_deadline(self):
        ads = self.spec.get("activeDeadlineSeconds")
        return bool(ads and self.start_mono and time.monotonic() > self.start_mono + ads)

    start_mono = None

    # -------------------------------------------------------------- run
    def run(self):
        try:
            self._run()
        except Exception as e:     # the double's own failure: say so in the pod, never hang
            self.k.log(f"pod {self.name}: {e!r}")
            for c in self.containers:
                if "terminated" not in c.state:
                    c.state = {"waiting": {"reason": "CreateContainerError", "message": f"kube_double: {e}"}}
            self.publish()
        finally:
            self.finished.set()

    def _run(self):
        while self.k.faults.get("unschedulable") and self.deleting is None:
            self.publish(phase="Pending", scheduled=False)
            self.wait(0.5)
        if self.deleting is not None:
            return
        self.k.store.update("pods", self.name, lambda o: o["spec"].__setitem__("nodeName", "kube-double"))
        self.start, self.start_mono = ts(), time.monotonic()
        for c in self.containers:
            c.state = {"waiting": {"reason": "PodInitializing" if not c.init and any(x.init for x in self.containers)
                                   else "ContainerCreating"}}
        self.publish(phase="Pending")
        if not self._prepare():
            return self._ended_early()
        if not self._start_containers():
            return self._ended_early()
        self._wait_regular()
        if self.deleting is not None:
            return
        if self.past_deadline():
            return self._ended_early()
        self._stop_sidecars()
        regular = [c for c in self.containers if not c.init]
        ok = all(c.state.get("terminated", {}).get("exitCode") == 0 for c in regular)
        self.publish(phase="Succeeded" if ok else "Failed")

    def _ended_early(self):
        if self.past_deadline() and self.deleting is None:
            self._kill_all()
            self.publish(phase="Failed", reason="DeadlineExceeded",
                         message="Pod was active on the node longer than the specified deadline")

    def _prepare(self):
        """Images and volumes; False when the pod was deleted or timed out first."""
        while True:
            problem = self._pull_images() or self._make_volumes()
            if problem is None:
                return True
            reason, message = problem
            for c in self.containers:
                c.state = {"waiting": {"reason": reason, "message": message}}
            self.publish()
            if not self.wait(1.0 if reason != "ErrImagePull" else 0.5):
                return False
            if reason == "ErrImagePull":
                for c in self.containers:
                    c.state = {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{c.spec["image"]}"'}}
                self.publish()
                if not self.wait(1.0):
                    return False

    def _pull_images(self):
        for c in self.containers:
            ref = c.spec["image"]
            if "@sha256:" not in ref:
                return ("ErrImagePull", f'kube_double: image "{ref}" is not pinned by digest (REPO@sha256:HEX); '
                        "this is the double's rule, a real kubelet would pull the tag")
            policy = c.spec.get("imagePullPolicy", "IfNotPresent")
            try:
                if policy != "Always" and self.k.docker.image_present(ref):
                    continue
                if policy == "Never":
                    return ("ErrImageNeverPull", f'Container image "{ref}" is not present with pull policy of Never')
                self.k.docker.pull(ref)
            except DockerError as e:
                return ("ErrImagePull", f'failed to pull and unpack image "{ref}": {e.message}')
        return None

    def _make_volumes(self):
        for v in self.spec.get("volumes") or []:
            kinds = [k for k in v if k != "name"]
            if kinds[0] == "emptyDir":
                self._empty_dir(v)
            elif kinds[0] == "secret":
                problem = self._secret(v)
                if problem:
                    return "ContainerCreating", problem
            else:
                return ("CreateContainerConfigError",
                        f'kube_double: volume "{v["name"]}" is of type {kinds[0]}, which the double does not run')
        return None

    def _volname(self, v):
        return f"kube-double-{self.k.port}-{self.key}-{v['name']}"

    def _empty_dir(self, v):
        name = self._volname(v)
        if name in self.volumes:
            return
        ed = v["emptyDir"] or {}
        body = {"Name": name, "Labels": {"kube-double": str(self.k.port)}}
        if ed.get("medium") == "Memory":
            from schema import parse_quantity
            size = int(parse_quantity(ed["sizeLimit"])) if "sizeLimit" in ed else self._memory_limit()
            fsg = (self.spec.get("securityContext") or {}).get("fsGroup")
            opts = f"size={max(size, 4096)},mode=" + (f"2777,gid={fsg}" if fsg is not None else "0777")
            body.update(Driver="local", DriverOpts={"type": "tmpfs", "device": "tmpfs", "o": opts})
        self.k.docker.call("POST", "/volumes/create", body)
        self.volumes.append(name)

    def _memory_limit(self):
        from schema import parse_quantity
        total = 0
        for c in self.containers:
            m = ((c.spec.get("resources") or {}).get("limits") or {}).get("memory")
            total += int(parse_quantity(m)) if m else 0
        return total or (256 << 20)

    def _secret(self, v):
        """Lay out the Secret volume V (atomic writer); a message when it cannot be."""
        src = v["secret"]
        d = self.dir / "volumes" / v["name"]
        if d.exists():
            return None
        sec = self.k.store.get("secrets", src.get("secretName"))
        if sec is None:
            return (f'MountVolume.SetUp failed for volume "{v["name"]}" : secret "{src.get("secretName")}" not found')
        import base64
        data = {k: base64.b64decode(x) for k, x in (sec.get("data") or {}).items()}
        for k, x in (sec.get("stringData") or {}).items():
            data[k] = x.encode()
        items = src.get("items") or [{"key": k, "path": k} for k in sorted(data)]
        for it in items:
            if it["key"] not in data:
                return (f'MountVolume.SetUp failed for volume "{v["name"]}" : references non-existent secret key: {it["key"]}')
        stamp = "..%s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y_%m_%d_%H_%M_%S.%f000")
        tmp = d.with_name(d.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / stamp).mkdir(parents=True)
        fsg = (self.spec.get("securityContext") or {}).get("fsGroup")
        mode = src.get("defaultMode", 0o644)
        tops = []
        for it in items:
            p = tmp / stamp / it["path"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data[it["key"]])
            m = it.get("mode", mode)
            if fsg is not None:
                os.chown(p, -1, fsg)
                m |= 0o440
            os.chmod(p, m)
            top = it["path"].split("/")[0]
            if top not in tops:
                tops.append(top)
        for dirpath, dirs, _ in os.walk(tmp / stamp):
            for x in [dirpath] + [os.path.join(dirpath, y) for y in dirs]:
                os.chmod(x, 0o755 | (0o2000 if fsg is not None else 0))
                if fsg is not None:
                    os.chown(x, -1, fsg)
        os.symlink(stamp, tmp / "..data")
        for top in tops:
            os.symlink(f"..data/{top}", tmp / top)
        os.chmod(tmp, 0o1777)
        os.rename(tmp, d)
        return None

    # -------------------------------------------------------------- containers
    def _network(self):
        labels = self.pod["metadata"].get("labels") or {}
        for np_ in self.k.store.list("networkpolicies")[0]:
            sp = np_.get("spec") or {}
            sel = (sp.get("podSelector") or {}).get("matchLabels") or {}
            exprs = (sp.get("podSelector") or {}).get("matchExpressions")
            if exprs or any(labels.get(k) != val for k, val in sel.items()):
                continue
            if "Egress" in (sp.get("policyTypes") or []) and not sp.get("egress"):
                return "none"
        return self.k.network

    def _create(self, c):
        spec, psc = c.spec, self.spec.get("securityContext") or {}
        sc = spec.get("securityContext") or {}
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        gid = sc.get("runAsGroup", psc.get("runAsGroup"))
        image_cfg = self.k.docker.call("GET", f"/images/{quote(spec['image'], safe='')}/json").get("Config") or {}
        if uid is None and sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            user = (image_cfg.get("User") or "").split(":")[0]
            if user in ("", "0", "root"):
                return ("CreateContainerConfigError", f'container has runAsNonRoot and image will run as root '
                        f'(pod: "{self.name}_{self.k.namespace}({self.uid})", container: {c.name})')
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) and uid == 0:
            return ("CreateContainerConfigError", "container's runAsUser breaks non-root policy "
                    f'(pod: "{self.name}_{self.k.namespace}({self.uid})", container: {c.name})')
        mounts = []
        by_name = {v["name"]: v for v in self.spec.get("volumes") or []}
        for m in spec.get("volumeMounts") or []:
            if m.get("subPath") or m.get("subPathExpr"):
                return ("CreateContainerConfigError", "kube_double: subPath mounts are not run by the double")
            v = by_name[m["name"]]
            if "emptyDir" in v:
                mounts.append({"Type": "volume", "Source": self._volname(v), "Target": m["mountPath"],
                               "ReadOnly": bool(m.get("readOnly"))})
            else:
                mounts.append({"Type": "bind", "Source": str(self.dir / "volumes" / v["name"]),
                               "Target": m["mountPath"], "ReadOnly": True})
        secopt = []
        if sc.get("allowPrivilegeEscalation") is False:
            secopt.append("no-new-privileges")
        prof = sc.get("seccompProfile") or psc.get("seccompProfile") or {}
        if prof.get("type") == "Localhost":
            # the kubelet's rule: the path is relative to its seccomp root and
            # the file is read when the container is created (a missing or
            # unreadable one is CreateContainerError, the pod stays Waiting)
            path = self.k.seccomp_root / prof.get("localhostProfile", "")
            try:
                secopt.append("seccomp=" + json.dumps(json.loads(path.read_text())))
            except (OSError, ValueError) as e:
                why = "no such file or directory" if isinstance(e, FileNotFoundError) else str(e)
                return ("CreateContainerError", f'failed to generate security options for container "{c.name}": '
                        f'failed to generate seccomp security options for container: cannot load seccomp '
                        f'profile "{path}": open {path}: {why}')
        elif prof.get("type") == "Unconfined":
            secopt.append("seccomp=unconfined")
        caps = sc.get("capabilities") or {}
        limits = (spec.get("resources") or {}).get("limits") or {}
        from schema import parse_quantity
        hc = {"Mounts": mounts, "ReadonlyRootfs": bool(sc.get("readOnlyRootFilesystem")),
              "CapDrop": caps.get("drop") or None, "CapAdd": caps.get("add") or None, "SecurityOpt": secopt,
              "Privileged": bool(sc.get("privileged")), "PidsLimit": self.k.pids_limit,
              "GroupAdd": [str(g) for g in ([psc["fsGroup"]] if "fsGroup" in psc else []) +
                           list(psc.get("supplementalGroups") or [])] or None,
              "NetworkMode": self.net if self.net else self._network()}
        if "memory" in limits:
            hc["Memory"] = hc["MemorySwap"] = int(parse_quantity(limits["memory"]))
        if "cpu" in limits:
            hc["NanoCpus"] = int(parse_quantity(limits["cpu"]) * 1e9)
        env = [f"{e['name']}={e.get('value', '')}" for e in spec.get("env") or []]
        body = {"Image": spec["image"], "Entrypoint": spec.get("command"), "Cmd": spec.get("args"),
                "WorkingDir": spec.get("workingDir") or "", "Env": env,
                "Hostname": self.name[:63], "HostConfig": hc,
                "Labels": {"kube-double": str(self.k.port), "kube-double.pod": self.name,
                           "kube-double.container": c.name}}
        if uid is not None:
            body["User"] = f"{uid}:{gid}" if gid is not None else str(uid)
        if spec.get("command") is None:
            body.pop("Entrypoint")
        if spec.get("args") is None:
            body.pop("Cmd")
        if hc["NetworkMode"].startswith("container:"):
            body.pop("Hostname")
        r = self.k.docker.call("POST", "/containers/create", body,
                               query={"name": f"kube-double-{self.k.port}-{self.key}-{c.name}"})
        c.cid = r["Id"]
        return None

    def _launch(self, c):
        problem = self._create(c)
        if problem:
            c.state = {"waiting": {"reason": problem[0], "message": problem[1]}}
            self.publish()
            return False
        c.log = Log()
        try:
            self.k.docker.call("POST", f"/containers/{c.cid}/start")
        except DockerError as e:
            # the runtime could not start it (a command the image lacks...):
            # containerd's StartError, the container terminated with 128
            c.log.close()
            c.state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": e.message,
                                      "startedAt": "1970-01-01T00:00:00Z", "finishedAt": ts(),
                                      "containerID": "docker://" + c.cid}}
            c.ended.set()
            if c.init:
                self.publish(phase="Failed" if not c.sidecar else None)
                return False
            return True
        if self.net is None:
            self.net = f"container:{c.cid}"
            info = self.k.docker.call("GET", f"/containers/{c.cid}/json")
            nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
            self.pod_ip = (nets.get(self.k.network) or {}).get("IPAddress") or None
        threading.Thread(target=self._pump, args=(c,), daemon=True).start()
        c.started = True
        c.state = {"running": {"startedAt": ts()}}
        return True

    pod_ip = None

    def _pump(self, c):
        try:
            conn, r = self.k.docker.logs(c.cid)
            try:
                for chunk in demux(r):
                    c.log.append(chunk)
            finally:
                conn.close()
            # dockerd's follow can end before the last (partial) line of a
            # container that exits at once is written: read it all again
            for _ in range(50):
                if not self.k.docker.call("GET", f"/containers/{c.cid}/json")["State"].get("Running"):
                    break
                time.sleep(0.1)
            conn, r = self.k.docker.logs(c.cid, follow=False)
            try:
                whole = b"".join(demux(r))
            finally:
                conn.close()
            have = len(c.log.data)
            if len(whole) > have:
                c.log.append(whole[have:])
        except Exception as e:    # the log ends; the exit is read from inspect
            self.k.log(f"log pump {self.name}/{c.name}: {e!r}")
        finally:
            c.log.close()
            with self.cv:
                self.cv.notify_all()

    def _start_containers(self):
        for c in self.containers:
            if self.deleting is not None or self.past_deadline():
                return False
            if not self._launch(c):
                return False
            if c.init and not c.sidecar:
                self.publish(pod_ip=self.pod_ip)
                while not c.log.done:
                    if not self.wait(0.1):
                        return False
                self._terminated(c)
                if c.state["terminated"]["exitCode"] != 0:
                    self.publish(phase="Failed")
                    return False
            if not c.init:
                continue
            self.publish(pod_ip=self.pod_ip)
        self.publish(phase="Running", pod_ip=self.pod_ip)
        return True

    def _terminated(self, c):
        st = self.k.docker.call("GET", f"/containers/{c.cid}/json")["State"]
        code = st.get("ExitCode", 137)
        reason = "OOMKilled" if st.get("OOMKilled") else "Completed" if code == 0 else "Error"
        c.state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": st.get("StartedAt", "")[:19] + "Z",
                                  "finishedAt": st.get("FinishedAt", "")[:19] + "Z", "containerID": "docker://" + c.cid}}
        c.ended.set()

    def _wait_regular(self):
        pending = [c for c in self.containers if not c.init and not c.ended.is_set()]
        while pending:
            for c in list(pending):
                if c.log.done and not self.k.docker.call("GET", f"/containers/{c.cid}/json")["State"].get("Running"):
                    self._terminated(c)
                    pending.remove(c)
                    self.publish(pod_ip=self.pod_ip)
            if pending and not self.wait(0.1):
                return

    def _term(self, cs, grace):
        """SIGTERM to CS, SIGKILL after GRACE seconds, then their statuses."""
        live = [c for c in cs if c.cid and not c.ended.is_set()]
        for c in live:
            try:
                self.k.docker.call("POST", f"/containers/{c.cid}/kill", query={"signal": "SIGTERM" if grace else "SIGKILL"},
                                   ok=(204, 409))
            except DockerError:
                pass
        end = time.monotonic() + grace
        while any(not c.log.done for c in live) and time.monotonic() < end:
            with self.cv:
                self.cv.wait(0.05)
        for c in live:
            try:
                self.k.docker.call("POST", f"/containers/{c.cid}/kill", query={"signal": "SIGKILL"}, ok=(204, 409))
            except DockerError:
                pass
        for c in live:
            with c.log.cv:
                c.log.cv.wait_for(lambda: c.log.done, timeout=10)
            try:
                self._terminated(c)
            except DockerError:
                pass

    def grace(self):
        return self.spec.get("terminationGracePeriodSeconds", 30)

    def _stop_sidecars(self):
        side = [c for c in self.containers if c.sidecar]
        for c in reversed(side):
            self._term([c], self.grace() if self.deleting is None else self.deleting)
        if side:
            self.publish()

    def _kill_all(self):
        self._term([c for c in self.containers if not c.init], self.grace())
        self._term(list(reversed([c for c in self.containers if c.init])), self.grace())

    # -------------------------------------------------------------- deletion
    def delete(self, grace):
        """Terminate gracefully, clean up, then drop the object (DELETED)."""
        with self.cv:
            if self.deleting is not None:
                return
            self.deleting = grace
            self.cv.notify_all()
        self.finished.wait(30)
        self._term([c for c in self.containers if not c.init], grace)
        self._term(list(reversed([c for c in self.containers if c.init])), grace)
        self.publish()
        self.cleanup()
        gone = self.k.store.get("pods", self.name)
        if gone is not None and gone["metadata"]["uid"] == self.uid:
            self.k.store.delete("pods", self.name)
        self.k.forget(self)

    def cleanup(self):
        for c in self.containers:
            if c.cid:
                try:
                    self.k.docker.call("DELETE", f"/containers/{c.cid}", query={"force": 1}, ok=(204, 404))
                except DockerError as e:
                    self.k.log(f"remove {c.cid}: {e}")
        for v in self.volumes:
            try:
                self.k.docker.call("DELETE", f"/volumes/{v}", query={"force": 1}, ok=(204, 404))
            except DockerError as e:
                self.k.log(f"remove volume {v}: {e}")
        shutil.rmtree(self.dir, ignore_errors=True)


class Kubelet:
    def __init__(self, store, docker, state, port, namespace, network, pids_limit, faults, log):
        self.store, self.docker, self.state, self.port = store, docker, state, port
        self.namespace, self.network, self.pids_limit, self.faults, self.log = namespace, network, pids_limit, faults, log
        # the kubelet's seccomp root (/var/lib/kubelet/seccomp): Localhost
        # profiles are read beneath it (__main__'s --seccomp-root)
        self.seccomp_root = state / "seccomp"
        self.pods = {}
        self.lock = threading.Lock()

    def admit(self, pod):
        run = PodRun(self, pod)
        with self.lock:
            self.pods[run.name] = run
        threading.Thread(target=run.run, daemon=True, name=f"pod-{run.name}").start()

    def get(self, name):
        with self.lock:
            return self.pods.get(name)

    def forget(self, run):
        with self.lock:
            if self.pods.get(run.name) is run:
                del self.pods[run.name]

    def delete(self, name, grace):
        run = self.get(name)
        if run is None:
            self.store.delete("pods", name)
            return
        threading.Thread(target=run.delete, args=(grace,), daemon=True).start()

    def wake(self):
        with self.lock:
            runs = list(self.pods.values())
        for r in runs:
            with r.cv:
                r.cv.notify_all()

    def shutdown(self):
        with self.lock:
            runs = list(self.pods.values())
        for r in runs:
            with r.cv:
                r.deleting = 0
                r.cv.notify_all()
        for r in runs:
            r.finished.wait(5)
            r.cleanup()
