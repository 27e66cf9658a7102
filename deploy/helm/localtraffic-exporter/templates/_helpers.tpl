{{/* The name part of labels and objects: the chart name unless overridden. */}}
{{- define "localtraffic-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' full name: the release name when it already contains the name (the kustomize install's names). */}}
{{- define "localtraffic-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "localtraffic-exporter.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels deploy/base puts on every object. */}}
{{- define "localtraffic-exporter.baseLabels" -}}
app.kubernetes.io/name: {{ include "localtraffic-exporter.name" . }}
app.kubernetes.io/part-of: localtraffic-exporter
{{- end }}

{{/* Helm's own labels on top; deploy/check/helm_test.go strips exactly these four before comparing with kustomize. */}}
{{- define "localtraffic-exporter.labels" -}}
{{ include "localtraffic-exporter.baseLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "localtraffic-exporter.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The exporter pods' selector, as deploy/base's (immutable once installed). */}}
{{- define "localtraffic-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "localtraffic-exporter.name" . }}
app.kubernetes.io/component: exporter
{{- end }}

{{- define "localtraffic-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "localtraffic-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "localtraffic-exporter.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/* registry/repository, the registry from global.imageRegistry, else image.registry (none: repository alone). */}}
{{- define "localtraffic-exporter.image" -}}
{{- $registry := (.Values.global).imageRegistry | default .Values.image.registry }}
{{- $name := .Values.image.repository }}
{{- with $registry }}{{ $name = printf "%s/%s" (trimSuffix "/" .) $name }}{{ end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $name .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $name (include "localtraffic-exporter.imageTag" .) }}
{{- end }}
{{- end }}

{{/* kube-rbac-proxy's image: global.imageRegistry, else kubeRBACProxy.image.registry, as the exporter's. */}}
{{- define "localtraffic-exporter.kubeRBACProxyImage" -}}
{{- $img := .Values.kubeRBACProxy.image }}
{{- $registry := (.Values.global).imageRegistry | default $img.registry }}
{{- $name := $img.repository }}
{{- with $registry }}{{ $name = printf "%s/%s" (trimSuffix "/" .) $name }}{{ end }}
{{- if $img.digest }}
{{- printf "%s@%s" $name $img.digest }}
{{- else }}
{{- printf "%s:%s" $name $img.tag }}
{{- end }}
{{- end }}

{{/* The namespace of an optional object (PodMonitor, ServiceMonitor, PrometheusRule, dashboards): its own
     namespace value, else the release's. Call with (list $ .Values.podMonitor). */}}
{{- define "localtraffic-exporter.objectNamespace" -}}
{{- (index . 1).namespace | default (index . 0).Release.Namespace }}
{{- end }}

{{/* The scrape endpoint's relabelings: node=<the pod's node> (so `up` of a failing exporter names its node), the
     job the alerts select (metricsJob, not the objects' names), then the user's. */}}
{{- define "localtraffic-exporter.scrapeRelabelings" -}}
{{- $m := index . 1 }}
relabelings:
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
  # The alerts select job="<metricsJob>": set here, it does not follow nameOverride/fullnameOverride.
  - targetLabel: job
    replacement: {{ (index . 0).Values.metricsJob }}
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The scrape endpoint's TLS and authentication, shared by the PodMonitor and the ServiceMonitor. Call with
     (list $ .Values.serviceMonitor "ServiceMonitor"). With kubeRBACProxy on, the defaults are kube-rbac-proxy's:
     HTTPS (its certificate is self-signed unless one is mounted: not verified) and Prometheus' own ServiceAccount
     token (bearerTokenFile, which only a ServiceMonitor has: a PodMonitor needs authorization from a Secret). */}}
{{- define "localtraffic-exporter.scrapeAuth" -}}
{{- $root := index . 0 }}
{{- $m := index . 1 }}
{{- $kind := index . 2 }}
{{- $proxy := $root.Values.kubeRBACProxy.enabled }}
{{- $scheme := $m.scheme | default (ternary "https" "" $proxy) }}
{{- $tls := $m.tlsConfig | default (ternary (dict "insecureSkipVerify" true) (dict) $proxy) }}
{{- with $scheme }}
scheme: {{ . }}
{{- end }}
{{- with $tls }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $m.authorization }}
authorization:
  {{- toYaml $m.authorization | nindent 2 }}
{{- else if $m.basicAuth }}
basicAuth:
  {{- toYaml $m.basicAuth | nindent 2 }}
{{- else if $proxy }}
{{- if eq $kind "PodMonitor" }}
{{- fail "podMonitor behind kube-rbac-proxy needs a token: set podMonitor.authorization (a Secret with a token of a ServiceAccount allowed GET /metrics), or use serviceMonitor, which sends Prometheus' own token" }}
{{- end }}
bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
{{- end }}
{{- end }}

{{/* The runbooks the alerts link to: prometheusRule.runbookURLBase, else docs/runbooks.md at the tag of the
     installed version (the chart's appVersion), not main, whose runbooks may describe a newer exporter. */}}
{{- define "localtraffic-exporter.runbookURLBase" -}}
{{- .Values.prometheusRule.runbookURLBase | default (printf "https://github.com/localtraffic/localtraffic-exporter/blob/%s/docs/runbooks.md" .Chart.AppVersion) | trimSuffix "/" }}
{{- end }}

{{/* The PrometheusRule's spec: the generated rules with metricsJob, the runbook base, the disabled alerts left
     out and the extra rule labels added. An unknown name in prometheusRule.disabled fails the render, so a
     renamed alert cannot silently come back. */}}
{{- define "localtraffic-exporter.ruleSpec" -}}
{{- $generated := .Files.Get "files/prometheus-rule-spec.yaml" | replace "job=\"localtraffic-exporter\"" (printf "job=%q" .Values.metricsJob) | replace "created_by_name=\"localtraffic-exporter\"" (printf "created_by_name=%q" (include "localtraffic-exporter.fullname" .)) | replace "https://github.com/localtraffic/localtraffic-exporter/blob/main/docs/runbooks.md" (include "localtraffic-exporter.runbookURLBase" .) | fromYaml }}
{{- $disabled := .Values.prometheusRule.disabled | default dict }}
{{- $extra := .Values.prometheusRule.additionalRuleLabels | default dict }}
{{- $alerts := dict }}
{{- $groups := list }}
{{- range $g := $generated.groups }}
{{- $rules := list }}
{{- range $r := $g.rules }}
{{- if $r.alert }}{{ $_ := set $alerts $r.alert true }}{{ end }}
{{- if not (and $r.alert (index $disabled $r.alert)) }}
{{- if $extra }}
{{- $_ := set $r "labels" (merge (dict) ($r.labels | default dict) $extra) }}
{{- end }}
{{- $rules = append $rules $r }}
{{- end }}
{{- end }}
{{- if $rules }}
{{- $groups = append $groups (set (omit $g "rules") "rules" $rules) }}
{{- end }}
{{- end }}
{{- range $name, $_ := $disabled }}
{{- if not (hasKey $alerts $name) }}
{{- fail (printf "prometheusRule.disabled names %s, which is not one of the chart's alerts (%s)" $name (keys $alerts | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}
{{- toYaml (dict "groups" $groups) }}
{{- end }}

{{/* A monitor's namespaceSelector: the user's, else the release namespace, where the exporter's pods and
     Service are. Call with (list $ .Values.serviceMonitor). */}}
{{- define "localtraffic-exporter.namespaceSelector" -}}
namespaceSelector:
{{- with (index . 1).namespaceSelector }}
  {{- toYaml . | nindent 2 }}
{{- else }}
  matchNames: [{{ (index . 0).Release.Namespace }}]
{{- end }}
{{- end }}
