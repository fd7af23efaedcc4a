{{/*
Serving helpers: ports, probes, replicas, resources, Service and HorizontalPodAutoscaler.
server.ports is either a list [{name, value|port}] or a map {http: 8000, grpc: 8001, ...}.
*/}}
{{- define "mlrecipe.serverPorts" -}}
{{- $p := (.Values.server | default dict).ports -}}
{{- $out := list -}}
{{- if kindIs "map" $p -}}
{{- range $k, $val := $p }}{{ if not (kindIs "invalid" $val) }}{{ $out = append $out (dict "name" $k "containerPort" (int $val) "protocol" "TCP") }}{{ end }}{{ end -}}
{{- else -}}
{{- range ($p | default list) }}{{ $out = append $out (dict "name" (toString .name) "containerPort" (int (.value | default .port)) "protocol" "TCP") }}{{ end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
Probes from server.{liveness,readiness,startup}_probe: {period_secs, failure_threshold,
initial_delay_secs, timeout_secs, path, port, enabled}.
Usage: include "mlrecipe.serverProbes" (dict "ctx" $ "live" "/v2/health/live" "ready" "/v2/health/ready")
*/}}
{{- define "mlrecipe.serverProbes" -}}
{{- $ctx := .ctx -}}
{{- $srv := $ctx.Values.server | default dict -}}
{{- $ports := include "mlrecipe.serverPorts" $ctx | fromJsonArray -}}
{{- $names := list -}}
{{- range $ports }}{{ $names = append $names .name }}{{ end -}}
{{- $defPort := "" -}}
{{- if has "http" $names }}{{ $defPort = "http" }}{{ else if $ports }}{{ $defPort = (first $ports).containerPort }}{{ end -}}
{{- $specs := list (list "livenessProbe" "liveness_probe" .live 15) (list "readinessProbe" "readiness_probe" .ready 5) (list "startupProbe" "startup_probe" .ready 0) -}}
{{- range $s := $specs }}
{{- $pr := index $srv (index $s 1) | default dict -}}
{{- $port := $pr.port | default $defPort -}}
{{- if and $port (ne (toString $pr.enabled) "false") }}
{{ index $s 0 }}:
  httpGet:
    path: {{ $pr.path | default (index $s 2) | quote }}
    port: {{ if kindIs "string" $port }}{{ $port | quote }}{{ else }}{{ int $port }}{{ end }}
  {{- $delay := ternary (index $s 3) $pr.initial_delay_secs (kindIs "invalid" $pr.initial_delay_secs) }}
  {{- if $delay }}
  initialDelaySeconds: {{ int $delay }}
  {{- end }}
  periodSeconds: {{ $pr.period_secs | default 10 | int }}
  failureThreshold: {{ $pr.failure_threshold | default 3 | int }}
  {{- with $pr.timeout_secs }}
  timeoutSeconds: {{ int . }}
  {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Replicas: resources.{min_replicas,max_replicas} when set, else server.autoscaling.{minReplicas,maxReplicas}. Usage: include "mlrecipe.replicas" (list $ "min") */}}
{{- define "mlrecipe.replicas" -}}
{{- $ctx := index . 0 -}}
{{- $as := ($ctx.Values.server | default dict).autoscaling | default dict -}}
{{- $r := $ctx.Values.resources | default dict -}}
{{- $min := $r.min_replicas | default $as.minReplicas | default 1 | int -}}
{{- if eq (index . 1) "min" }}{{ $min }}{{ else }}{{ $r.max_replicas | default $as.maxReplicas | default $min | int | max $min }}{{ end -}}
{{- end -}}

{{/* Container resources of a server: resources.{requests,limits}, else resources.resources.* (reference examples), else server.resources.*. */}}
{{- define "mlrecipe.serverResources" -}}
{{- $r := .Values.resources | default dict -}}
{{- $alt := $r.resources | default ((.Values.server | default dict).resources) | default dict -}}
{{- toJson (dict "requests" ($r.requests | default $alt.requests) "limits" ($r.limits | default $alt.limits)) -}}
{{- end -}}

{{/* ClusterIP Service over the server ports. Usage: include "mlrecipe.serverService" (dict "ctx" $ "selector" <extra map>) */}}
{{- define "mlrecipe.serverService" -}}
{{- $ctx := .ctx -}}
{{- $ports := include "mlrecipe.serverPorts" $ctx | fromJsonArray -}}
{{- if $ports }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "mlrecipe.name" (list $ctx "") }}
  labels:
    {{- include "mlrecipe.labels" $ctx | nindent 4 }}
  annotations:
    {{- include "mlrecipe.releaseAnnotations" $ctx | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "mlrecipe.selectorLabels" $ctx | nindent 4 }}
    {{- range $k, $v := (.selector | default dict) }}
    {{ $k }}: {{ $v | quote }}
    {{- end }}
  ports:
    {{- range $ports }}
    - name: {{ .name }}
      protocol: TCP
      port: {{ .containerPort }}
      targetPort: {{ .containerPort }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* HPA when max replicas > min replicas. Usage: include "mlrecipe.serverHPA" (dict "ctx" $ "apiVersion" "apps/v1" "kind" "Deployment") */}}
{{- define "mlrecipe.serverHPA" -}}
{{- $ctx := .ctx -}}
{{- $min := int (include "mlrecipe.replicas" (list $ctx "min")) -}}
{{- $max := int (include "mlrecipe.replicas" (list $ctx "max")) -}}
{{- $as := ($ctx.Values.server | default dict).autoscaling | default dict -}}
{{- if gt $max $min }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "mlrecipe.name" (list $ctx "") }}
  labels:
    {{- include "mlrecipe.labels" $ctx | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: {{ .apiVersion }}
    kind: {{ .kind }}
    name: {{ include "mlrecipe.name" (list $ctx "") }}
  minReplicas: {{ $min }}
  maxReplicas: {{ $max }}
  {{- with $as.metrics }}
  metrics:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* A Deployment + Service + optional HPA serving with the step runtime. Usage: include "mlrecipe.deploymentServer" (dict "ctx" $ "live" "/path" "ready" "/path") */}}
{{- define "mlrecipe.deploymentServer" -}}
{{- $ctx := .ctx -}}
{{- $srv := $ctx.Values.server | default dict -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "mlrecipe.name" (list $ctx "") }}
  {{- include "mlrecipe.workloadMeta" $ctx | nindent 2 }}
spec:
  replicas: {{ include "mlrecipe.replicas" (list $ctx "min") }}
  selector:
    matchLabels:
      {{- include "mlrecipe.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      {{- include "mlrecipe.podMeta" (dict "ctx" $ctx) | nindent 6 }}
    spec:
      {{- include "mlrecipe.podSpec" (dict "ctx" $ctx "container" ($srv.name | default $ctx.Chart.Name) "block" "server" "runtime" true
          "ports" (include "mlrecipe.serverPorts" $ctx | fromJsonArray)
          "probes" (include "mlrecipe.serverProbes" (dict "ctx" $ctx "live" .live "ready" .ready) | trim)
          "resources" (include "mlrecipe.serverResources" $ctx | fromJson)) | trim | nindent 6 }}
{{- with (include "mlrecipe.serverService" (dict "ctx" $ctx) | trim) }}
---
{{ . }}
{{- end }}
{{- with (include "mlrecipe.serverHPA" (dict "ctx" $ctx "apiVersion" "apps/v1" "kind" "Deployment") | trim) }}
---
{{ . }}
{{- end }}
{{- end -}}
