{{- define "airlock.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "airlock.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "airlock.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "airlock.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "airlock.selectorLabels" -}}
app.kubernetes.io/name: {{ include "airlock.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "airlock.labels" -}}
{{ include "airlock.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The sandbox's objects (Namespace, Role, NetworkPolicy) carry fixed
labels, the same the kustomize base gives them: the test compares the two. */}}
{{- define "airlock.sandboxLabels" -}}
app.kubernetes.io/name: airlock
app.kubernetes.io/component: sandbox
app.kubernetes.io/part-of: airlock
{{- end -}}

{{- define "airlock.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "airlock.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name the existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The server's image, by digest only: a tag can be moved to other bytes. */}}
{{- define "airlock.image" -}}
{{- if .Values.image.tag -}}
{{- fail (printf "image.tag (%q) is refused: name the image by digest (image.repository + image.digest \"sha256:<64 hex>\"); a tag can be moved to other bytes" .Values.image.tag) -}}
{{- end -}}
{{- $repo := required "image.repository is required (e.g. registry.example.com/airlock/airlock)" .Values.image.repository -}}
{{- if or (contains "@" $repo) (regexMatch ":[^/]*$" $repo) -}}
{{- fail (printf "image.repository (%q) holds a tag or a digest: give the repository alone and the digest in image.digest" $repo) -}}
{{- end -}}
{{- $d := required "image.digest is required: the sha256 the image was pushed as (\"sha256:<64 hex>\")" .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $d) -}}
{{- fail (printf "image.digest (%q) is not \"sha256:<64 lower-case hex>\"" $d) -}}
{{- end -}}
{{- printf "%s@%s" $repo $d -}}
{{- end -}}

{{/* What the values allow together, checked once (the Deployment includes it). */}}
{{- define "airlock.check" -}}
{{- if not (has .Values.driver (list "kubernetes" "docker" "native" "disabled")) -}}
{{- fail (printf "driver (%q) is one of kubernetes, docker, native, disabled" .Values.driver) -}}
{{- end -}}
{{- if eq .Values.driver "native" -}}
{{- fail "driver native is refused by this chart: native boxes need CAP_SYS_ADMIN, user namespaces and cgroup delegation on the node, which the hardened server pod does not have. Run it under systemd (deploy/airlock.service), or use driver kubernetes" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.store.postgresql.existingSecret) -}}
{{- fail "replicaCount > 1 needs one PostgreSQL store for all replicas: set store.postgresql.existingSecret (a Secret holding the DSN under store.postgresql.key)" -}}
{{- end -}}
{{- if and (eq .Values.driver "kubernetes") (not .Values.kubernetes.registry) -}}
{{- fail "driver kubernetes needs kubernetes.registry: where `airlock image export` + skopeo put the runtime image (pods pull REGISTRY/airlock-box@DIGEST)" -}}
{{- end -}}
{{- if and (eq .Values.driver "docker") (not .Values.docker.host) -}}
{{- fail "driver docker needs docker.host (DOCKER_HOST of the dockerd the server uses): this chart mounts no host socket" -}}
{{- end -}}
{{- if and .Values.kubernetes.runtimeClass.create (not .Values.kubernetes.runtimeClass.name) -}}
{{- fail "kubernetes.runtimeClass.create needs kubernetes.runtimeClass.name" -}}
{{- end -}}
{{- if and .Values.kubernetes.runtimeClass.create (not (has .Values.kubernetes.runtimeClass.handler (list "runsc" "kata" "kata-qemu" "kata-clh" "kata-fc"))) -}}
{{- fail (printf "kubernetes.runtimeClass.handler (%q) is runsc (gVisor) or a kata handler" .Values.kubernetes.runtimeClass.handler) -}}
{{- end -}}
{{- if or (not (regexMatch "^(runtime-default|localhost:[A-Za-z0-9_-][A-Za-z0-9._/-]*)$" .Values.kubernetes.seccomp)) (regexMatch "(^localhost:|/)\\.\\.?(/|$)|//|/$" .Values.kubernetes.seccomp) -}}
{{- fail "kubernetes.seccomp is runtime-default or localhost:PATH (PATH relative to the kubelet's seccomp root, e.g. localhost:airlock/airlock.json, without . or .. components)" -}}
{{- end -}}
{{- end -}}

{{/* The hardened container securityContext (the server's and the smoke test's). */}}
{{- define "airlock.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
privileged: false
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "airlock.podSecurity" -}}
runAsNonRoot: true
runAsUser: {{ .Values.server.runAsUser }}
runAsGroup: {{ .Values.server.runAsGroup }}
fsGroup: {{ .Values.server.runAsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}
