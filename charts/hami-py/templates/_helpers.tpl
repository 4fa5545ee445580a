{{/*
The namespace everything installs into, and that every cross-reference names (RoleBinding subjects, the webhook's
Service, the leader Lease, the trusted ServiceAccount identities): `namespace`, else HAMi's `namespaceOverride`,
else the release's (`helm install -n`).
*/}}
{{- define "hami.namespace" -}}
{{- .Values.namespace | default .Values.namespaceOverride | default .Release.Namespace -}}
{{- end -}}

{{/* Labels on every object; selectors use only name + component (stable across upgrades). */}}
{{- define "hami.labels" -}}
app.kubernetes.io/name: hami
app.kubernetes.io/part-of: hami
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hami.annotations" -}}
{{- with .Values.global.annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
An image reference from {registry, repository, tag}: the component's registry, else global.imageRegistry; the
component's tag, else `defaultTag`. Call with (dict "image" .. "global" .Values.global "defaultTag" ..).
*/}}
{{- define "hami.image" -}}
{{- $registry := .image.registry | default .global.imageRegistry -}}
{{- $tag := .image.tag | default .defaultTag | toString -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* hami-py's own images default to global.imageTag, else the chart's appVersion (= hami_core.__version__). */}}
{{- define "hami.appTag" -}}
{{- .Values.global.imageTag | default .Chart.AppVersion -}}
{{- end -}}

{{/*
kube-scheduler must match the cluster's minor version: scheduler.kubeScheduler.image.tag, else the cluster's
version as Helm sees it (.Capabilities.KubeVersion) with a distribution suffix stripped (v1.31.1+k3s1 ->
v1.31.1, v1.30.8-eks-2d5f260 -> v1.30.8), as HAMi's chart.
*/}}
{{- define "hami.kubeSchedulerTag" -}}
{{- .Values.scheduler.kubeScheduler.image.tag | default (regexReplaceAll "^(v[0-9]+\\.[0-9]+\\.[0-9]+).*$" .Capabilities.KubeVersion.Version "${1}") -}}
{{- end -}}

{{/* imagePullSecrets: global + the component's, rendered only when there are any. Call with (list global component) */}}
{{- define "hami.pullSecrets" -}}
{{- $secrets := list -}}
{{- range . -}}{{- range . -}}{{- $secrets = append $secrets . -}}{{- end -}}{{- end -}}
{{- if $secrets }}
imagePullSecrets:
{{- range $secrets | uniq }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
The device-config.yaml text (ConfigMap hami-scheduler-device): one section per entry of `devices` whose `config`
is not null, under its `section` key (HAMi's device-config.yaml names: vnpus, iluvatars, ...), then
deviceConfig.extra (non-vendor keys). An empty `config: {}` renders as an empty section (the plugin's defaults).
*/}}
{{- define "hami.deviceConfig" -}}
{{- $out := dict -}}
{{- range $vendor, $dev := .Values.devices -}}
{{- if not (kindIs "map" $dev) -}}
{{- fail (printf "devices.%s: must be a map with section and config, got %v" $vendor $dev) -}}
{{- end -}}
{{- if hasKey $dev "config" -}}
{{- if not (kindIs "invalid" $dev.config) -}}
{{- $_ := set $out ($dev.section | default $vendor) $dev.config -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := .Values.deviceConfig.extra -}}
{{- if hasKey $out $k -}}
{{- fail (printf "deviceConfig.extra.%s: a vendor section of devices already renders %s" $k $k) -}}
{{- end -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
The extender's managedResources: every resource name the device config renders, i.e. the string value of every
key named resource...Name... (resourceCountName, resourceVCountName, resourceNameGCU, ...) at any depth of the
vendor sections (ascend's configs[], iluvatars[] included), so a name is written once, in values. Sorted, unique.
*/}}
{{- define "hami.resourceNames" -}}
{{- $names := list -}}
{{- range $vendor, $dev := .Values.devices -}}
{{- if and (hasKey $dev "config") (not (kindIs "invalid" $dev.config)) -}}
{{- $names = concat $names (include "hami.collectResourceNames" $dev.config | fromYamlArray) -}}
{{- end -}}
{{- end -}}
{{- toYaml ($names | uniq | sortAlpha) -}}
{{- end -}}

{{- define "hami.collectResourceNames" -}}
{{- $names := list -}}
{{- if kindIs "map" . -}}
{{- range $k, $v := . -}}
{{- if and (regexMatch "^resource.*Name" $k) (kindIs "string" $v) -}}
{{- if $v -}}{{- $names = append $names $v -}}{{- end -}}
{{- else if or (kindIs "map" $v) (kindIs "slice" $v) -}}
{{- $names = concat $names (include "hami.collectResourceNames" $v | fromYamlArray) -}}
{{- end -}}
{{- end -}}
{{- else if kindIs "slice" . -}}
{{- range . -}}
{{- $names = concat $names (include "hami.collectResourceNames" . | fromYamlArray) -}}
{{- end -}}
{{- end -}}
{{- toYaml $names -}}
{{- end -}}

{{/* The KubeSchedulerConfiguration of the kube-scheduler container (ConfigMap hami-scheduler-newversion). */}}
{{- define "hami.schedulerConfig" -}}
{{- $le := .Values.scheduler.leaderElection -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ .Values.scheduler.leaderElect }}
  resourceName: {{ $le.resourceName }}
  resourceNamespace: {{ include "hami.namespace" . }}
  leaseDuration: {{ $le.leaseDuration }}
  renewDeadline: {{ $le.renewDeadline }}
  retryPeriod: {{ $le.retryPeriod }}
clientConnection:
  qps: {{ .Values.scheduler.kubeScheduler.qps }}
  burst: {{ .Values.scheduler.kubeScheduler.burst }}
profiles:
  - schedulerName: {{ .Values.schedulerName }}
extenders:
  - urlPrefix: https://127.0.0.1:{{ .Values.scheduler.extender.extenderPort }}
    filterVerb: filter
    bindVerb: bind
    preemptVerb: preempt
    enableHTTPS: true
    tlsConfig:
      insecure: true
    nodeCacheCapable: true
    weight: 1
    httpTimeout: {{ .Values.scheduler.extender.httpTimeout }}
    managedResources:
{{- range (include "hami.resourceNames" . | fromYamlArray) }}
      - name: {{ . }}
        ignoredByScheduler: true
{{- end }}
{{- end -}}

{{/* The ServiceAccounts whose pod-annotation changes the webhook trusts (--trusted-identities, matchConditions). */}}
{{- define "hami.trustedUsers" -}}
{{- $ns := include "hami.namespace" . -}}
{{- toYaml (list (printf "system:serviceaccount:%s:hami-scheduler" $ns) (printf "system:serviceaccount:%s:hami-device-plugin" $ns)) -}}
{{- end -}}

{{/* The TLS Secret the webhook serves with (certgen Job or cert-manager writes it). */}}
{{- define "hami.tlsSecret" -}}hami-scheduler-tls{{- end -}}

{{/* The prometheus scrape exposure is on when ServiceMonitors are. */}}
{{- define "hami.metricsExposed" -}}{{- if .Values.serviceMonitor.enabled -}}true{{- end -}}{{- end -}}
