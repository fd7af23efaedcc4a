{{/*
Names. Every object name is "<prefix>-<release>" ("<prefix>-<release>-<step_name>" when the values set
step_name, as mlrecipe does so that the steps of one release never share an object name), at most 63
characters (DNS label): a longer name is cut and ends with 8 characters of its sha256.
Usage: include "mlrecipe.name" (list $ "pytorchjob")
*/}}
{{- define "mlrecipe.name" -}}
{{- $ctx := index . 0 -}}
{{- $prefix := index . 1 -}}
{{- $max := 63 -}}
{{- if gt (len .) 2 }}{{ $max = int (index . 2) }}{{ end -}}
{{- $parts := list -}}
{{- if $prefix }}{{ $parts = append $parts $prefix }}{{ end -}}
{{- $parts = append $parts $ctx.Release.Name -}}
{{- with $ctx.Values.step_name }}{{ $parts = append $parts . }}{{ end -}}
{{- $full := join "-" $parts -}}
{{- if le (len $full) $max -}}
{{- $full -}}
{{- else -}}
{{- printf "%s-%s" ($full | trunc (int (sub $max 9)) | trimSuffix "-") ($full | sha256sum | trunc 8) -}}
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
