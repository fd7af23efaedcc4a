{{/*
A batch/v1 Job running the step runtime; with more than one node an Indexed Job
(completions = parallelism = nodes) plus a headless Service, so that rank 0 resolves as
<job>-0.<service> (PET_MASTER_ADDR). The runtime maps JOB_COMPLETION_INDEX to PET_NODE_RANK.
Usage: include "mlrecipe.job" (dict "ctx" $ "block" "process" "prefix" "data-process" "extraEnv" <list>)
*/}}
{{- define "mlrecipe.job" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $nnodes := int (include "mlrecipe.nnodes" $ctx) -}}
{{- $name := include "mlrecipe.name" (list $ctx .prefix 56) -}}
{{- $port := int ($v.master_port | default 29500) -}}
{{- $env := list (dict "name" "PET_NNODES" "value" (toString $nnodes)) (dict "name" "PET_NPROC_PER_NODE" "value" (include "mlrecipe.nprocPerNode" $ctx)) -}}
{{- $podExtra := dict -}}
{{- if gt $nnodes 1 -}}
{{- $env = concat $env (list (dict "name" "PET_MASTER_ADDR" "value" (printf "%s-0.%s" $name $name)) (dict "name" "PET_MASTER_PORT" "value" (toString $port))) -}}
{{- $podExtra = dict "subdomain" $name -}}
{{- end -}}
{{- $env = concat $env (.extraEnv | default list) -}}
{{- if gt $nnodes 1 }}
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  labels:
    {{- include "mlrecipe.labels" $ctx | nindent 4 }}
  annotations:
    {{- include "mlrecipe.releaseAnnotations" $ctx | nindent 4 }}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    {{- include "mlrecipe.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: master
      port: {{ $port }}
      targetPort: {{ $port }}
---
{{- end }}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ $name }}
  {{- include "mlrecipe.workloadMeta" $ctx | nindent 2 }}
spec:
  backoffLimit: {{ int ($v.backoff_limit | default 0) }}
  {{- if gt $nnodes 1 }}
  completionMode: Indexed
  completions: {{ $nnodes }}
  parallelism: {{ $nnodes }}
  {{- end }}
  {{- if not (kindIs "invalid" $v.ttl_seconds_after_finished) }}
  ttlSecondsAfterFinished: {{ int $v.ttl_seconds_after_finished }}
  {{- end }}
  template:
    metadata:
      {{- include "mlrecipe.podMeta" (dict "ctx" $ctx) | nindent 6 }}
    spec:
      {{- include "mlrecipe.podSpec" (dict "ctx" $ctx "container" $ctx.Chart.Name "block" .block "runtime" true
          "restartPolicy" "Never" "extraEnv" $env "podExtra" $podExtra) | trim | nindent 6 }}
{{- end -}}
