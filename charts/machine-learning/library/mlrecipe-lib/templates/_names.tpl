{{/*
Names. Every object name is "<prefix>-<release>" cut to 63 characters (DNS label).
Usage: include "mlrecipe.name" (list $ "pytorchjob")
*/}}
{{- define "mlrecipe.name" -}}
{{- $ctx := index . 0 -}}
{{- $prefix := index . 1 -}}
{{- $max := 63 -}}
{{- if gt (len .) 2 }}{{ $max = index . 2 }}{{ end -}}
{{- if $prefix -}}
{{- printf "%s-%s" $prefix $ctx.Release.Name | trunc (int $max) | trimSuffix "-" -}}
{{- else -}}
{{- $ctx.Release.Name | trunc (int $max) | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The step name: values.step_name, else the chart name. */}}
{{- define "mlrecipe.stepName" -}}
{{- .Values.step_name | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The catalog name ("training/pytorchjob-distributed") from the chart annotation. */}}
{{- define "mlrecipe.catalogName" -}}
{{- $ann := .Chart.Annotations | default dict -}}
{{- index $ann "mlrecipe.io/catalog-name" | default .Chart.Name -}}
{{- end -}}

{{/* Name of the ConfigMap that carries step_runtime.py and step.json. */}}
{{- define "mlrecipe.runtimeConfigMapName" -}}
{{- include "mlrecipe.name" (list . "step") -}}
{{- end -}}
