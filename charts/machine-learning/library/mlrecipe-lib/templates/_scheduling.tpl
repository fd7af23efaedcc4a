{{/*
Scheduling: node selector, tolerations, scheduler name.
node type: resources.node_type, else resources.node_instance_type (MPIJob-style recipes).
With hyperpod.enabled the instance type gets the "ml." prefix of SageMaker HyperPod nodes, and the pods
tolerate hyperpod.tolerations (default: the node-health-status=Unschedulable taint, as in the reference).
*/}}
{{- define "mlrecipe.nodeType" -}}
{{- $r := .Values.resources | default dict -}}
{{- $t := $r.node_type | default $r.node_instance_type | default "" | toString -}}
{{- $hp := .Values.hyperpod | default dict -}}
{{- if and $t $hp.enabled (not (hasPrefix "ml." $t)) -}}
{{- $t = printf "ml.%s" $t -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{/* Usage: include "mlrecipe.nodeSelector" (dict "ctx" $ "nodeType" "<override>") ; emits "nodeSelector:" or nothing. */}}
{{- define "mlrecipe.nodeSelector" -}}
{{- $ctx := .ctx -}}
{{- $t := .nodeType | default (include "mlrecipe.nodeType" $ctx) -}}
{{- $extra := $ctx.Values.node_selector | default dict -}}
{{- if or $t $extra }}
nodeSelector:
  {{- if $t }}
  node.kubernetes.io/instance-type: {{ $t | quote }}
  {{- end }}
  {{- range $k, $v := $extra }}
  {{ $k }}: {{ $v | quote }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Usage: include "mlrecipe.tolerations" (dict "ctx" $ "tolerations" <list or nil>) */}}
{{- define "mlrecipe.tolerations" -}}
{{- $ctx := .ctx -}}
{{- $list := .tolerations | default $ctx.Values.tolerations | default list -}}
{{- $hp := $ctx.Values.hyperpod | default dict -}}
{{- if $hp.enabled }}
{{- $health := dict "key" "sagemaker.amazonaws.com/node-health-status" "operator" "Equal" "value" "Unschedulable" "effect" "NoSchedule" }}
{{- $list = concat $list ($hp.tolerations | default (list $health)) }}
{{- end }}
{{- if $list }}
tolerations:
{{- range $t := $list }}
  - key: {{ tpl (toString $t.key) $ctx | quote }}
    {{- if $t.operator }}
    operator: {{ $t.operator | quote }}
    {{- end }}
    {{- if and (ne (toString $t.operator) "Exists") (not (kindIs "invalid" $t.value)) }}
    value: {{ tpl (toString $t.value) $ctx | quote }}
    {{- end }}
    {{- if $t.effect }}
    effect: {{ $t.effect | quote }}
    {{- end }}
    {{- if not (kindIs "invalid" $t.toleration_seconds) }}
    tolerationSeconds: {{ int $t.toleration_seconds }}
    {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* schedulerName when values.scheduler_name is set. */}}
{{- define "mlrecipe.schedulerName" -}}
{{- with .Values.scheduler_name }}
schedulerName: {{ . | quote }}
{{- end }}
{{- end -}}
