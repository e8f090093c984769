{{/* Names and labels shared by every object. */}}

{{- define "pms.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pms.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "pms.labels" -}}
{{ include "pms.selector" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The subcommand and flags of component .component. */}}
{{- define "pms.args" -}}
{{- $v := .root.Values -}}
{{- $c := index $v .component -}}
{{- if eq .component "gateway" -}}
- gateway
- --config
- /etc/pms/gateway.toml
{{- else if eq .component "web" -}}
- web
- --listen
- {{ printf "0.0.0.0:%v" $c.port | quote }}
- --gateway-url
- {{ printf "http://%s-gateway:%v" (include "pms.fullname" .root) $v.gateway.service.port | quote }}
{{- else -}}
- {{ .component }}
- --listen
- {{ printf "0.0.0.0:%v" $c.port | quote }}
- --data-dir
- /var/lib/pms
{{- if and (eq .component "users") (not $v.demo) }}
- --no-seed
{{- end }}
{{- if and (eq .component "parks") (not $v.demo) }}
- --no-seed-parks
{{- end }}
{{- end -}}
{{- end -}}

{{/* A variable from the Secret's key. */}}
{{- define "pms.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.existingSecret }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end -}}

{{/* The environment of component .component: secrets by reference, never by value. */}}
{{- define "pms.env" -}}
{{- $v := .root.Values -}}
- name: PMS_LOG
  value: info
- name: PMS_LOG_FORMAT
  value: json
{{- if ne .component "web" }}
{{ include "pms.secretEnv" (dict "root" .root "name" "PMS_JWT_SECRET" "key" "jwt-secret") }}
{{- end }}
{{- if has .component (list "users" "parks" "payments") }}
{{ include "pms.secretEnv" (dict "root" .root "name" "PMS_DATABASE_URL" "key" (printf "%s-database-url" .component)) }}
{{- end }}
{{- if has .component (list "users" "parks" "payments" "web") }}
{{- /* The services' events; the front office's sessions, shared by its replicas. */}}
- name: PMS_NATS_URL
  value: {{ $v.nats.url | quote }}
{{- end }}
{{- if eq .component "parks" }}
{{ include "pms.secretEnv" (dict "root" .root "name" "PMS_DEVICE_SECRET" "key" "device-secret") }}
{{- end }}
{{- if has .component (list "gateway" "web") }}
{{- /* The front office names the people it signs in; the gateway trusts it by this key. */}}
{{ include "pms.secretEnv" (dict "root" .root "name" "PMS_FORWARDER_KEY" "key" "forwarder-key") }}
{{- end }}
{{- if and $v.otlp.endpoint (has .component (list "gateway" "users" "parks" "payments")) }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $v.otlp.endpoint | quote }}
{{- end }}
{{- if and (eq .component "users") $v.demo }}
{{ include "pms.secretEnv" (dict "root" .root "name" "PMS_SEED_PASSWORD" "key" "seed-password" "optional" true) }}
{{- end }}
{{- end -}}
