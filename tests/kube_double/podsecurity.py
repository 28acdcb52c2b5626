"""Pod Security admission, level restricted (what the double's namespace is
labelled with: pod-security.kubernetes.io/enforce=restricted), with the
checks and the messages of k8s.io/pod-security-admission: the baseline
checks by ID, then the restricted ones by ID (a restricted check overriding
a baseline one replaces it: capabilities, hostPath volumes, seccomp), each a
"reason (detail)" joined by ", " after `violates PodSecurity
"restricted:latest": `. Windows pods, AppArmor annotations, sysctls and
SELinux are checked only as far as written here (the driver sets none)."""

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                   "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}


def _plural(one, many, n):
    return one if n == 1 else many


def _quote(names):
    return ", ".join(f'"{n}"' for n in names)


def _containers(spec):
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            yield c


def _sc(c):
    return c.get("securityContext") or {}


def _who(names):
    return f'{_plural("container", "containers", len(names))} {_quote(names)}'


def host_namespaces(spec):
    bad = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return ("host namespaces", ", ".join(bad)) if bad else None


def host_ports(spec):
    names, ports = [], []
    for c in _containers(spec):
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                names.append(c["name"]) if c["name"] not in names else None
                ports.append(str(p["hostPort"]))
    if names:
        return "hostPort", f'{_who(names)} {_plural("uses", "use", len(names))} {_plural("hostPort", "hostPorts", len(ports))} {", ".join(ports)}'
    return None


def privileged(spec):
    names = [c["name"] for c in _containers(spec) if _sc(c).get("privileged")]
    return ("privileged", f"{_who(names)} must not set securityContext.privileged=true") if names else None


def proc_mount(spec):
    names = [c["name"] for c in _containers(spec) if _sc(c).get("procMount") not in (None, "Default")]
    return ("procMount", f'{_who(names)} must not set securityContext.procMount to "Unmasked"') if names else None


def sysctls(spec):
    bad = [s.get("name") for s in (spec.get("securityContext") or {}).get("sysctls") or []
           if s.get("name") not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


def allow_privilege_escalation(spec):
    names = [c["name"] for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if names:
        return "allowPrivilegeEscalation != false", f"{_who(names)} must set securityContext.allowPrivilegeEscalation=false"
    return None


def capabilities(spec):
    missing, adding, caps = [], [], set()
    for c in _containers(spec):
        cap = _sc(c).get("capabilities")
        if cap is None:
            missing.append(c["name"])
            continue
        if "ALL" not in (cap.get("drop") or []):
            missing.append(c["name"])
        bad = [a for a in cap.get("add") or [] if a != "NET_BIND_SERVICE"]
        if bad:
            adding.append(c["name"])
            caps.update(bad)
    details = []
    if missing:
        details.append(f'{_who(missing)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_who(adding)} must not include {_quote(sorted(caps))} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def restricted_volumes(spec):
    names, types = [], set()
    for v in spec.get("volumes") or []:
        for k in v:
            if k != "name" and k not in ALLOWED_VOLUMES:
                names.append(v.get("name"))
                types.add(k)
    if names:
        return "restricted volume types", (f'{_plural("volume", "volumes", len(names))} {_quote(names)} '
                                           f'{_plural("uses", "use", len(names))} restricted volume '
                                           f'{_plural("type", "types", len(types))} {_quote(sorted(types))}')
    return None


def run_as_non_root(spec):
    psc = spec.get("securityContext") or {}
    bad_setters, explicit, implicit = [], [], []
    if psc.get("runAsNonRoot") is False:
        bad_setters.append("pod")
    pod_ok = psc.get("runAsNonRoot") is True
    for c in _containers(spec):
        v = _sc(c).get("runAsNonRoot")
        if v is False:
            explicit.append(c["name"])
        elif v is None and not pod_ok:
            implicit.append(c["name"])
    if explicit:
        bad_setters.append(_who(explicit))
    if bad_setters:
        return "runAsNonRoot != true", f"{' and '.join(bad_setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return "runAsNonRoot != true", f"pod or {_who(implicit)} must set securityContext.runAsNonRoot=true"
    return None


def run_as_user(spec):
    setters = []
    if (spec.get("securityContext") or {}).get("runAsUser") == 0:
        setters.append("pod")
    names = [c["name"] for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if names:
        setters.append(_who(names))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp(spec):
    good = ("RuntimeDefault", "Localhost")
    psp = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    bad_setters, bad_values, explicit, implicit = [], set(), [], []
    if psp is not None and psp not in good:
        bad_setters.append("pod")
        bad_values.add(psp)
    for c in _containers(spec):
        t = (_sc(c).get("seccompProfile") or {}).get("type")
        if t is not None:
            if t not in good:
                explicit.append(c["name"])
                bad_values.add(t)
        elif psp not in good:
            implicit.append(c["name"])
    if explicit:
        bad_setters.append(_who(explicit))
    if bad_setters:
        return "seccompProfile", (f"{' and '.join(bad_setters)} must not set securityContext.seccompProfile.type to "
                                  f"{_quote(sorted(bad_values))}")
    if implicit:
        return "seccompProfile", (f'pod or {_who(implicit)} must set securityContext.seccompProfile.type to '
                                  f'"RuntimeDefault" or "Localhost"')
    return None


# baseline (by ID; capabilities_baseline, hostPathVolumes and
# seccompProfile_baseline are overridden by their restricted checks), then
# restricted (by ID)
CHECKS = (host_namespaces, host_ports, privileged, proc_mount, sysctls,
          allow_privilege_escalation, capabilities, restricted_volumes, run_as_non_root, run_as_user, seccomp)


def violations(pod):
    """The restricted profile's forbidden reasons for POD: [] when it is admitted."""
    spec = pod.get("spec") or {}
    return [f"{r} ({d})" for r, d in filter(None, (check(spec) for check in CHECKS))]


def message(name, reasons):
    return f'pods "{name}" is forbidden: violates PodSecurity "restricted:latest": ' + ", ".join(reasons)
