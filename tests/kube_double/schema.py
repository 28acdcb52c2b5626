"""What the double knows of the objects it serves: closed allow-lists of the
fields of Pod, Secret, NetworkPolicy and DeleteOptions (their real names, as
k8s.io/api v1.35 spells them), the API server's decoding with
fieldValidation (Strict: an unknown or duplicate field is a 400 with the real
`strict decoding error: ...` message; Warn, the default: accepted, the field
dropped, a `Warning: 299 - "..."` header; Ignore: dropped silently), its
quantities, and the validation (422) it does of what the driver sends.

A field the list does not know is unknown here even if a newer API server
knew it: the lists cover the v1.35 fields of these kinds. Subtrees marked ANY
(probes, affinity, the other volume sources...) are taken as they come: the
double does not run them, and a Pod using them is held with
CreateContainerConfigError by its kubelet (kubelet.py), never silently run."""
import base64
import json
import re

ANY = "any"
STR, INT, BOOL, QTY, STRMAP, QTYMAP = "string", "int", "bool", "quantity", "strmap", "qtymap"


def obj(**fields):
    return ("object", fields)


def lst(item):
    return ("list", item)


OBJECT_META = obj(
    name=STR, generateName=STR, namespace=STR, selfLink=STR, uid=STR, resourceVersion=STR, generation=INT,
    creationTimestamp=ANY, deletionTimestamp=ANY, deletionGracePeriodSeconds=INT, labels=STRMAP,
    annotations=STRMAP, ownerReferences=lst(ANY), finalizers=lst(STR), managedFields=lst(ANY))

SECCOMP = obj(type=STR, localhostProfile=STR)
APPARMOR = obj(type=STR, localhostProfile=STR)
SELINUX = obj(user=STR, role=STR, type=STR, level=STR)
WINDOWS = obj(gmsaCredentialSpecName=STR, gmsaCredentialSpec=STR, runAsUserName=STR, hostProcess=BOOL)

POD_SECURITY_CONTEXT = obj(
    seLinuxOptions=SELINUX, windowsOptions=WINDOWS, runAsUser=INT, runAsGroup=INT, runAsNonRoot=BOOL,
    supplementalGroups=lst(INT), supplementalGroupsPolicy=STR, fsGroup=INT, sysctls=lst(obj(name=STR, value=STR)),
    fsGroupChangePolicy=STR, seccompProfile=SECCOMP, appArmorProfile=APPARMOR, seLinuxChangePolicy=STR)

SECURITY_CONTEXT = obj(
    capabilities=obj(add=lst(STR), drop=lst(STR)), privileged=BOOL, seLinuxOptions=SELINUX,
    windowsOptions=WINDOWS, runAsUser=INT, runAsGroup=INT, runAsNonRoot=BOOL, readOnlyRootFilesystem=BOOL,
    allowPrivilegeEscalation=BOOL, procMount=STR, seccompProfile=SECCOMP, appArmorProfile=APPARMOR)

RESOURCES = obj(limits=QTYMAP, requests=QTYMAP, claims=lst(obj(name=STR, request=STR)))

CONTAINER = obj(
    name=STR, image=STR, command=lst(STR), args=lst(STR), workingDir=STR,
    ports=lst(obj(name=STR, hostPort=INT, containerPort=INT, protocol=STR, hostIP=STR)),
    envFrom=lst(ANY), env=lst(obj(name=STR, value=STR, valueFrom=ANY)), resources=RESOURCES,
    resizePolicy=lst(obj(resourceName=STR, restartPolicy=STR)), restartPolicy=STR, restartPolicyRules=lst(ANY),
    volumeMounts=lst(obj(name=STR, readOnly=BOOL, recursiveReadOnly=STR, mountPath=STR, subPath=STR,
                         mountPropagation=STR, subPathExpr=STR)),
    volumeDevices=lst(obj(name=STR, devicePath=STR)), livenessProbe=ANY, readinessProbe=ANY, startupProbe=ANY,
    lifecycle=ANY, terminationMessagePath=STR, terminationMessagePolicy=STR, imagePullPolicy=STR,
    securityContext=SECURITY_CONTEXT, stdin=BOOL, stdinOnce=BOOL, tty=BOOL)

# every volume source of v1.35; the double runs emptyDir and secret only
VOLUME_SOURCES = ("hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs",
                  "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker",
                  "downwardAPI", "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk",
                  "photonPersistentDisk", "projected", "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral",
                  "image")
_vol = {s: ANY for s in VOLUME_SOURCES}
_vol.update(
    name=STR, hostPath=obj(path=STR, type=STR), emptyDir=obj(medium=STR, sizeLimit=QTY),
    secret=obj(secretName=STR, items=lst(obj(key=STR, path=STR, mode=INT)), defaultMode=INT, optional=BOOL))
VOLUME = ("object", _vol)

POD_SPEC = obj(
    volumes=lst(VOLUME), initContainers=lst(CONTAINER), containers=lst(CONTAINER), ephemeralContainers=lst(ANY),
    restartPolicy=STR, terminationGracePeriodSeconds=INT, activeDeadlineSeconds=INT, dnsPolicy=STR,
    nodeSelector=STRMAP, serviceAccountName=STR, serviceAccount=STR, automountServiceAccountToken=BOOL,
    nodeName=STR, hostNetwork=BOOL, hostPID=BOOL, hostIPC=BOOL, shareProcessNamespace=BOOL,
    securityContext=POD_SECURITY_CONTEXT, imagePullSecrets=lst(obj(name=STR)), hostname=STR, subdomain=STR,
    affinity=ANY, schedulerName=STR, tolerations=lst(ANY), hostAliases=lst(ANY), priorityClassName=STR,
    priority=INT, dnsConfig=ANY, readinessGates=lst(ANY), runtimeClassName=STR, enableServiceLinks=BOOL,
    preemptionPolicy=STR, overhead=QTYMAP, topologySpreadConstraints=lst(ANY), setHostnameAsFQDN=BOOL,
    os=obj(name=STR), hostUsers=BOOL, schedulingGates=lst(obj(name=STR)), resourceClaims=lst(ANY),
    resources=RESOURCES, hostnameOverride=STR)

POD = obj(apiVersion=STR, kind=STR, metadata=OBJECT_META, spec=POD_SPEC, status=ANY)
SECRET = obj(apiVersion=STR, kind=STR, metadata=OBJECT_META, immutable=BOOL, data=STRMAP, stringData=STRMAP,
             type=STR)
LABEL_SELECTOR = obj(matchLabels=STRMAP, matchExpressions=lst(obj(key=STR, operator=STR, values=lst(STR))))
NETWORK_POLICY = obj(apiVersion=STR, kind=STR, metadata=OBJECT_META,
                     spec=obj(podSelector=LABEL_SELECTOR, ingress=lst(ANY), egress=lst(ANY), policyTypes=lst(STR)))
DELETE_OPTIONS = obj(kind=STR, apiVersion=STR, gracePeriodSeconds=INT,
                     preconditions=obj(uid=STR, resourceVersion=STR), orphanDependents=BOOL,
                     propagationPolicy=STR, dryRun=lst(STR), ignoreStoreReadErrorWithClusterBreakingPotential=BOOL)

KINDS = {"Pod": POD, "Secret": SECRET, "NetworkPolicy": NETWORK_POLICY, "DeleteOptions": DELETE_OPTIONS}

QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
QUANTITY_MSG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_SUFFIX = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


class DecodeError(Exception):
    """A 400: the body cannot be handled as the kind (the message is the server's)."""


def parse_quantity(s):
    """A resource.Quantity's value as a float, or None when it does not parse
    (the API server's decoder refuses it: a 400 before any validation)."""
    if not isinstance(s, str):
        return float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else None
    m = QUANTITY_RE.match(s)
    if not m:
        return None
    num, suf = m.groups()
    try:
        n = float(num)
    except ValueError:
        return None
    if suf in _SUFFIX:
        return n * _SUFFIX[suf]
    e = re.fullmatch(r"[eE]([-+]?[0-9]+)", suf)
    if e:
        return n * 10 ** int(e.group(1))
    return None


def _no_dupes(pairs):
    seen = {}
    dupes = []
    for k, v in pairs:
        if k in seen:
            dupes.append(k)
        seen[k] = v
    if dupes:
        seen["\0dupes"] = dupes
    return seen


_GO = {STR: "string", INT: "int64", BOOL: "bool"}


def _walk(doc, spec, path, unknown, dupes):
    """Check DOC against SPEC: unknown and duplicate fields go to the lists
    (and are dropped from DOC); a wrong JSON type is a DecodeError."""
    if spec == ANY or doc is None:
        return
    if isinstance(spec, tuple) and spec[0] == "object":
        if not isinstance(doc, dict):
            raise DecodeError(f"json: cannot unmarshal {_jtype(doc)} into Go value of type object at {path or '.'}")
        for d in doc.pop("\0dupes", []):
            dupes.append(f"{path}.{d}" if path else d)
        for k in list(doc):
            sub = spec[1].get(k)
            where = f"{path}.{k}" if path else k
            if sub is None:
                unknown.append(where)
                del doc[k]
                continue
            _walk(doc[k], sub, where, unknown, dupes)
        return
    if isinstance(spec, tuple) and spec[0] == "list":
        if not isinstance(doc, list):
            raise DecodeError(f"json: cannot unmarshal {_jtype(doc)} into Go struct field {path} of type []")
        for i, item in enumerate(doc):
            _walk(item, spec[1], f"{path}[{i}]", unknown, dupes)
        return
    if spec in (STRMAP, QTYMAP):
        if not isinstance(doc, dict):
            raise DecodeError(f"json: cannot unmarshal {_jtype(doc)} into Go struct field {path} of type map")
        for d in doc.pop("\0dupes", []):
            dupes.append(f"{path}.{d}")
        for k, v in doc.items():
            if spec == QTYMAP:
                if parse_quantity(v) is None:
                    raise DecodeError(QUANTITY_MSG)
            elif not isinstance(v, str):
                raise DecodeError(f"json: cannot unmarshal {_jtype(v)} into Go struct field {path} of type string")
        return
    if spec == QTY:
        if parse_quantity(doc) is None:
            raise DecodeError(QUANTITY_MSG)
        return
    ok = {STR: isinstance(doc, str), BOOL: isinstance(doc, bool),
          INT: isinstance(doc, int) and not isinstance(doc, bool)}[spec]
    if not ok:
        raise DecodeError(f"json: cannot unmarshal {_jtype(doc)} into Go struct field {path} of type {_GO[spec]}")


def _jtype(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(v), "null")


def decode(body, kind, validation):
    """The API server's decoding of BODY (bytes) as KIND under
    fieldValidation VALIDATION (Strict, Warn or Ignore): (the object, the
    warnings to send). Raises DecodeError with the server's message."""
    prefix = f'{kind} in version "v1" cannot be handled as a {kind}: '
    try:
        doc = json.loads(body, object_pairs_hook=_no_dupes)
    except ValueError as e:
        raise DecodeError(prefix + f"json: {e}") from None
    if not isinstance(doc, dict):
        raise DecodeError(prefix + "json: cannot unmarshal into Go value of type struct")
    unknown, dupes = [], []
    try:
        _walk(doc, KINDS[kind], "", unknown, dupes)
    except DecodeError as e:
        raise DecodeError(prefix + str(e)) from None
    problems = [f'unknown field "{u}"' for u in unknown] + [f'duplicate field "{d}"' for d in dupes]
    if validation == "Strict" and problems:
        raise DecodeError(prefix + "strict decoding error: " + ", ".join(problems))
    if kind == "Secret":
        for k, v in (doc.get("data") or {}).items():
            try:
                base64.b64decode(v, validate=True)
            except ValueError:
                raise DecodeError(prefix + f"illegal base64 data at input byte 0 (key {k})") from None
    return doc, (problems if validation == "Warn" else [])


# ------------------------------------------------------------ validation (422)

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                 "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
             "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def _q(v):
    return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


class Invalid:
    """The field errors of one object: the 422's causes."""

    def __init__(self):
        self.causes = []

    def add(self, reason, field, message):
        self.causes.append({"reason": reason, "message": f"{field}: {message}", "field": field})

    def invalid(self, field, value, why):
        self.add("FieldValueInvalid", field, f"Invalid value: {_q(value)}: {why}")

    def required(self, field):
        self.add("FieldValueRequired", field, "Required value")

    def unsupported(self, field, value, allowed):
        self.add("FieldValueNotSupported", field,
                 f"Unsupported value: {_q(value)}: supported values: " + ", ".join(f'"{a}"' for a in allowed))

    def not_found(self, field, value):
        self.add("FieldValueNotFound", field, f"Not found: {_q(value)}")

    def duplicate(self, field, value):
        self.add("FieldValueDuplicate", field, f"Duplicate value: {_q(value)}")


def validate_meta(meta, inv, namespace):
    name = meta.get("name")
    if not name:
        inv.add("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        inv.invalid("metadata.name", name, SUBDOMAIN_MSG if len(name) <= 253 else "must be no more than 253 characters")
    for k, v in (meta.get("labels") or {}).items():
        key = k.split("/", 1)[-1]
        if not QUALIFIED_NAME.match(key) or len(key) > 63:
            inv.invalid("metadata.labels", k, "name part must consist of alphanumeric characters, '-', '_' or '.'")
        if len(v) > 63 or not LABEL_VALUE.match(v):
            inv.invalid("metadata.labels", v, "a valid label must be an empty string or consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an alphanumeric character")


def _resources(c, path, inv):
    res = c.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    for which, m in (("limits", limits), ("requests", requests)):
        for r, v in m.items():
            f = f"{path}.resources.{which}[{r}]"
            if r not in ("cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi") and "/" not in r:
                inv.invalid(f"{path}.resources.{which}[{r}]", r, "must be a standard resource type or fully qualified")
            elif parse_quantity(v) < 0:
                inv.invalid(f, v, "must be greater than or equal to 0")
    for r, v in requests.items():
        if r in limits and parse_quantity(v) > parse_quantity(limits[r]) >= 0:
            inv.invalid(f"{path}.resources.requests", v, f"must be less than or equal to {r} limit of {limits[r]}")


def _container(c, path, inv, volumes, init):
    name = c.get("name")
    if not name:
        inv.required(f"{path}.name")
    elif len(name) > 63 or not DNS1123_LABEL.match(name):
        inv.invalid(f"{path}.name", name, LABEL_MSG)
    if not c.get("image"):
        inv.required(f"{path}.image")
    if c.get("imagePullPolicy") not in (None, "Always", "IfNotPresent", "Never"):
        inv.unsupported(f"{path}.imagePullPolicy", c["imagePullPolicy"], ["Always", "IfNotPresent", "Never"])
    rp = c.get("restartPolicy")
    if rp is not None and (not init or rp != "Always"):
        if init:
            inv.unsupported(f"{path}.restartPolicy", rp, ["Always"])
        else:
            inv.add("FieldValueForbidden", f"{path}.restartPolicy", "Forbidden: may not be set for non-init containers")
    _resources(c, path, inv)
    seen = set()
    for j, m in enumerate(c.get("volumeMounts") or []):
        mp = f"{path}.volumeMounts[{j}]"
        if m.get("name") not in volumes:
            inv.not_found(f"{mp}.name", m.get("name", ""))
        if not m.get("mountPath"):
            inv.required(f"{mp}.mountPath")
        elif m["mountPath"] in seen:
            inv.invalid(f"{mp}.mountPath", m["mountPath"], "must be unique")
        seen.add(m.get("mountPath"))
    for j, e in enumerate(c.get("env") or []):
        if not e.get("name"):
            inv.required(f"{path}.env[{j}].name")


def validate_pod(pod, namespace):
    inv = Invalid()
    validate_meta(pod.get("metadata") or {}, inv, namespace)
    spec = pod.get("spec") or {}
    volumes = {}
    for i, v in enumerate(spec.get("volumes") or []):
        p = f"spec.volumes[{i}]"
        n = v.get("name")
        if not n:
            inv.required(f"{p}.name")
        elif not DNS1123_LABEL.match(n):
            inv.invalid(f"{p}.name", n, LABEL_MSG)
        elif n in volumes:
            inv.duplicate(f"{p}.name", n)
        sources = [s for s in VOLUME_SOURCES if s in v]
        if len(sources) != 1:
            inv.add("FieldValueRequired" if not sources else "FieldValueForbidden", p,
                    "Required value: must specify a volume type" if not sources else
                    "Forbidden: may not specify more than 1 volume type")
        ed = v.get("emptyDir")
        if isinstance(ed, dict):
            if ed.get("medium") not in (None, "", "Memory", "HugePages"):
                inv.unsupported(f"{p}.emptyDir.medium", ed["medium"], ["", "Memory", "HugePages"])
            if "sizeLimit" in ed and parse_quantity(ed["sizeLimit"]) < 0:
                inv.invalid(f"{p}.emptyDir.sizeLimit", ed["sizeLimit"], "must be greater than or equal to 0")
        sec = v.get("secret")
        if isinstance(sec, dict):
            if not sec.get("secretName"):
                inv.required(f"{p}.secret.secretName")
            dm = sec.get("defaultMode")
            if dm is not None and not 0 <= dm <= 0o777:
                inv.invalid(f"{p}.secret.defaultMode", dm, "must be a number between 0 and 0777 (octal), both inclusive")
            for j, it in enumerate(sec.get("items") or []):
                ip = f"{p}.secret.items[{j}]"
                if not it.get("key"):
                    inv.required(f"{ip}.key")
                path = it.get("path", "")
                if not path:
                    inv.required(f"{ip}.path")
                elif path.startswith("/"):
                    inv.invalid(f"{ip}.path", path, "must be a relative path")
                elif ".." in path.split("/"):
                    inv.invalid(f"{ip}.path", path, "must not contain '..'")
                elif path.startswith(".."):
                    inv.invalid(f"{ip}.path", path, "must not start with '..'")
        volumes[n] = v
    containers = spec.get("containers") or []
    if not containers:
        inv.required("spec.containers")
    names = set()
    for kind, init in (("initContainers", True), ("containers", False)):
        for i, c in enumerate(spec.get(kind) or []):
            _container(c, f"spec.{kind}[{i}]", inv, volumes, init)
            if c.get("name") in names:
                inv.duplicate(f"spec.{kind}[{i}].name", c.get("name"))
            names.add(c.get("name"))
    rp = spec.get("restartPolicy")
    if rp not in (None, "Always", "OnFailure", "Never"):
        inv.unsupported("spec.restartPolicy", rp, ["Always", "OnFailure", "Never"])
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and ads <= 0:
        inv.invalid("spec.activeDeadlineSeconds", ads, "must be between 1 and 2147483647, inclusive")
    tg = spec.get("terminationGracePeriodSeconds")
    if tg is not None and tg < 0:
        inv.invalid("spec.terminationGracePeriodSeconds", tg, "must be greater than or equal to 0")
    sc = spec.get("securityContext") or {}
    sp = sc.get("seccompProfile") or {}
    if sp.get("type") == "Localhost" and not sp.get("localhostProfile"):
        inv.required("spec.securityContext.seccompProfile.localhostProfile")
    if sp.get("type") not in (None, "RuntimeDefault", "Localhost", "Unconfined"):
        inv.unsupported("spec.securityContext.seccompProfile.type", sp["type"], ["Localhost", "RuntimeDefault", "Unconfined"])
    return inv.causes


def validate_secret(sec, namespace):
    inv = Invalid()
    validate_meta(sec.get("metadata") or {}, inv, namespace)
    total = 0
    for k, v in (sec.get("data") or {}).items():
        if not SECRET_KEY.match(k) or len(k) > 253:
            inv.invalid(f"data[{k}]", k, "a valid config key must consist of alphanumeric characters, '-', '_' or '.'")
        total += len(base64.b64decode(v))
    if total > 1 << 20:
        inv.add("FieldValueTooLong", "data", f"Too long: may not be more than {1 << 20} bytes")
    return inv.causes


def validate_netpol(np_, namespace):
    inv = Invalid()
    validate_meta(np_.get("metadata") or {}, inv, namespace)
    for i, t in enumerate((np_.get("spec") or {}).get("policyTypes") or []):
        if t not in ("Ingress", "Egress"):
            inv.unsupported(f"spec.policyTypes[{i}]", t, ["Egress", "Ingress"])
    return inv.causes
