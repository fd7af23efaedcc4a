{{/*
Volumes and mounts.
- pvc: [{name, mount_path}] -> volumes pv-1..n (persistentVolumeClaim)
- ebs: {storage, mount_path, storage_class} -> generic ephemeral volume "ebs"
- /dev/shm: a memory-backed emptyDir "shm" (size limit: values.shm_size)
- the step runtime ConfigMap at /etc/mlrecipe (when "runtime" is true)
- framework scripts at /etc/framework-scripts (when the chart ships scripts/<framework>/)
Usage: include "mlrecipe.volumes" (dict "ctx" $ "runtime" true "extra" <list of volume maps>)
*/}}
{{- define "mlrecipe.volumes" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
volumes:
  - name: shm
    emptyDir:
      medium: Memory
      {{- with $v.shm_size }}
      sizeLimit: {{ . | quote }}
      {{- end }}
  {{- if .runtime }}
  - name: mlrecipe
    configMap:
      name: {{ include "mlrecipe.runtimeConfigMapName" $ctx }}
  {{- end }}
  {{- if include "mlrecipe.frameworkFiles" $ctx }}
  - name: framework-scripts
    configMap:
      name: {{ include "mlrecipe.name" (list $ctx "framework-scripts") }}
  {{- end }}
  {{- range $i, $pv := ($v.pvc | default list) }}
  - name: pv-{{ add1 $i }}
    persistentVolumeClaim:
      claimName: {{ $pv.name | quote }}
  {{- end }}
  {{- if and $v.ebs (or $v.ebs.storage $v.ebs.mount_path) }}
  - name: ebs
    ephemeral:
      volumeClaimTemplate:
        metadata:
          labels:
            {{- include "mlrecipe.selectorLabels" $ctx | nindent 12 }}
        spec:
          accessModes: ["ReadWriteOnce"]
          storageClassName: {{ $v.ebs.storage_class | default "ebs-sc-wait" | quote }}
          resources:
            requests:
              storage: {{ $v.ebs.storage | default "100Gi" | quote }}
  {{- end }}
  {{- range (.extra | default list) }}
  - {{ toYaml . | indent 4 | trim }}
  {{- end }}
{{- end -}}

{{/* Usage: include "mlrecipe.volumeMounts" (dict "ctx" $ "runtime" true "extra" <list>) */}}
{{- define "mlrecipe.volumeMounts" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
volumeMounts:
  - name: shm
    mountPath: /dev/shm
  {{- if .runtime }}
  - name: mlrecipe
    mountPath: /etc/mlrecipe
    readOnly: true
  {{- end }}
  {{- if include "mlrecipe.frameworkFiles" $ctx }}
  - name: framework-scripts
    mountPath: /etc/framework-scripts
    readOnly: true
  {{- end }}
  {{- range $i, $pv := ($v.pvc | default list) }}
  - name: pv-{{ add1 $i }}
    mountPath: {{ $pv.mount_path | quote }}
  {{- end }}
  {{- if and $v.ebs (or $v.ebs.storage $v.ebs.mount_path) }}
  - name: ebs
    mountPath: {{ $v.ebs.mount_path | default "/tmp" | quote }}
  {{- end }}
  {{- range (.extra | default list) }}
  - {{ toYaml . | indent 4 | trim }}
  {{- end }}
{{- end -}}

{{/*
The glob of the scripts the chart ships for values.framework: scripts/<framework>/*, else
scripts/<framework up to the first "-">/* (so "vllm-0.15.0" may use scripts/vllm/).
*/}}
{{- define "mlrecipe.frameworkGlob" -}}
{{- $fw := toString (.Values.framework | default "") -}}
{{- if $fw -}}
{{- $exact := printf "scripts/%s/*" $fw -}}
{{- $short := printf "scripts/%s/*" (splitList "-" $fw | first) -}}
{{- if gt (len (.Files.Glob $exact)) 0 }}{{ $exact }}{{ else if gt (len (.Files.Glob $short)) 0 }}{{ $short }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* Non-empty when the chart ships scripts for values.framework. */}}
{{- define "mlrecipe.frameworkFiles" -}}
{{- include "mlrecipe.frameworkGlob" . -}}
{{- end -}}

{{/* ConfigMap with the framework scripts (reference layout: flat file names). */}}
{{- define "mlrecipe.frameworkConfigMap" -}}
{{- if include "mlrecipe.frameworkFiles" . }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "mlrecipe.name" (list . "framework-scripts") }}
  labels:
    {{- include "mlrecipe.labels" . | nindent 4 }}
data:
  {{- range $path, $_ := .Files.Glob (include "mlrecipe.frameworkGlob" .) }}
  {{ base $path }}: {{ $.Files.Get $path | quote }}
  {{- end }}
{{- end }}
{{- end -}}
