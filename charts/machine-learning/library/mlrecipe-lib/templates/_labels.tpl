{{/* Selector labels: the release and the step. */}}
{{- define "mlrecipe.selectorLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
mlrecipe.io/step: {{ include "mlrecipe.stepName" . | quote }}
{{- end -}}

{{/* Common labels for every object. */}}
{{- define "mlrecipe.labels" -}}
{{ include "mlrecipe.selectorLabels" . }}
app.kubernetes.io/name: {{ .Chart.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
{{- end -}}

{{/* Labels of a workload object: common labels plus the optional Kueue queue. */}}
{{- define "mlrecipe.workloadLabels" -}}
{{ include "mlrecipe.labels" . }}
{{- with .Values.kueue }}
{{- if .queue_name }}
kueue.x-k8s.io/queue-name: {{ .queue_name | quote }}
{{- end }}
{{- if .priority_class }}
kueue.x-k8s.io/priority-class: {{ .priority_class | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The release keys as annotations: the reference's Kubeflow Pipelines helm component and its utilities find a
release's pods and Services by these annotations (app.kubernetes.io/managed-by == "Helm", instance == release).
*/}}
{{- define "mlrecipe.releaseAnnotations" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/*
Annotations of a workload object: the release keys and, with hyperpod.enabled and hyperpod.auto_restart (on
unless set false, as in the reference), the annotations SageMaker HyperPod's job auto-resume documentation
names (the reference renders an undocumented "enable-job-auto-restart" instead).
*/}}
{{- define "mlrecipe.workloadAnnotations" -}}
{{ include "mlrecipe.releaseAnnotations" . }}
{{- $hp := .Values.hyperpod | default dict -}}
{{- if and $hp.enabled (ne (toString $hp.auto_restart) "false") }}
sagemaker.amazonaws.com/enable-job-auto-resume: "true"
sagemaker.amazonaws.com/job-max-retry-count: {{ $hp.max_retry | default 3 | toString | quote }}
{{- end }}
{{- end -}}

{{/* metadata.labels + metadata.annotations block of a workload object (indent yourself). */}}
{{- define "mlrecipe.workloadMeta" -}}
labels:
  {{- include "mlrecipe.workloadLabels" . | nindent 2 }}
annotations:
  {{- include "mlrecipe.workloadAnnotations" . | nindent 2 }}
{{- end -}}

{{/*
Pod template metadata. The release keys are labels and annotations both: Kubeflow Pipelines' helm component
finds a release's pods by the annotations. Usage: include "mlrecipe.podMeta" (dict "ctx" $ "labels" (dict "role" "x"))
*/}}
{{- define "mlrecipe.podMeta" -}}
{{- $ctx := .ctx -}}
labels:
  {{- include "mlrecipe.selectorLabels" $ctx | nindent 2 }}
  app.kubernetes.io/managed-by: {{ $ctx.Release.Service | quote }}
  {{- range $k, $v := (.labels | default dict) }}
  {{ $k }}: {{ $v | quote }}
  {{- end }}
annotations:
  {{- include "mlrecipe.releaseAnnotations" $ctx | nindent 2 }}
  karpenter.sh/do-not-disrupt: "true"
  sidecar.istio.io/inject: "false"
{{- end -}}
