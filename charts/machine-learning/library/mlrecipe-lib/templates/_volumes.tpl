{{/*
Volumes and mounts.
- pvc: [{name, mount_path}] -> volumes pv-1..n (persistentVolumeClaim)
- ebs: {storage, mount_path, storage_class} -> generic ephemeral volume "ebs"
- /dev/shm: a memory-backed emptyDir "shm" (size limit: values.shm_size)
- the step runtime ConfigMap at /etc/mlrecipe (when "runtime" is true)
- framework scripts at /etc/framework-scripts (when the chart ships scripts/<framework>/): a tree chart
  (Chart.yaml annotation mlrecipe.io/framework-scripts: tree) gets a writable emptyDir that the
  init container "init-framework-scripts" fills from the flat ConfigMap; other charts mount the
  ConfigMap itself, read-only
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
  - name: {{ ternary "framework-scripts-flat" "framework-scripts" (eq (include "mlrecipe.frameworkTree" $ctx) "true") }}
    configMap:
      name: {{ include "mlrecipe.name" (list $ctx "framework-scripts") }}
  {{- if eq (include "mlrecipe.frameworkTree" $ctx) "true" }}
  - name: framework-scripts
    emptyDir: {}
  {{- end }}
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
    {{- if ne (include "mlrecipe.frameworkTree" $ctx) "true" }}
    readOnly: true
    {{- end }}
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

{{/* "true" when the chart ships nested framework trees (Chart.yaml annotation mlrecipe.io/framework-scripts: tree). */}}
{{- define "mlrecipe.frameworkTree" -}}
{{- eq (index (.Chart.Annotations | default dict) "mlrecipe.io/framework-scripts" | default "") "tree" -}}
{{- end -}}

{{/*
The glob of the scripts the chart ships for values.framework. A tree chart: scripts/<framework>/**
(every file below). Other charts: scripts/<framework>/*, else scripts/<framework up to the first "-">/*
(so "vllm-0.15.0" may use scripts/vllm/).
*/}}
{{- define "mlrecipe.frameworkGlob" -}}
{{- $fw := toString (.Values.framework | default "") -}}
{{- if $fw -}}
{{- if eq (include "mlrecipe.frameworkTree" .) "true" -}}
{{- $tree := printf "scripts/%s/**" $fw -}}
{{- if gt (len (.Files.Glob $tree)) 0 }}{{ $tree }}{{ end -}}
{{- else -}}
{{- $exact := printf "scripts/%s/*" $fw -}}
{{- $short := printf "scripts/%s/*" (splitList "-" $fw | first) -}}
{{- if gt (len (.Files.Glob $exact)) 0 }}{{ $exact }}{{ else if gt (len (.Files.Glob $short)) 0 }}{{ $short }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Non-empty when the chart ships scripts for values.framework. */}}
{{- define "mlrecipe.frameworkFiles" -}}
{{- include "mlrecipe.frameworkGlob" . -}}
{{- end -}}

{{/*
ConfigMap with the framework scripts, one key per file. A tree chart keys each file by its path below
scripts/<framework>/ with "/" written "--" (text--peft_accelerate.py); other charts by base name.
*/}}
{{- define "mlrecipe.frameworkConfigMap" -}}
{{- if include "mlrecipe.frameworkFiles" . }}
{{- $tree := eq (include "mlrecipe.frameworkTree" .) "true" -}}
{{- $prefix := printf "scripts/%s/" (toString .Values.framework) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "mlrecipe.name" (list . "framework-scripts") }}
  labels:
    {{- include "mlrecipe.labels" . | nindent 4 }}
data:
  {{- range $path, $_ := .Files.Glob (include "mlrecipe.frameworkGlob" .) }}
  {{- $key := ternary (trimPrefix $prefix $path | replace "/" "--") (base $path) $tree }}
  {{ $key }}: {{ $.Files.Get $path | quote }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
The init container of a tree chart: copies the flat ConfigMap (mounted at /tmp/framework-scripts-flat)
into the writable /etc/framework-scripts, turning "--" in key names back into directories.
Usage: include "mlrecipe.frameworkInit" $ctx (empty unless a tree chart ships the framework)
*/}}
{{- define "mlrecipe.frameworkInit" -}}
{{- if and (include "mlrecipe.frameworkFiles" .) (eq (include "mlrecipe.frameworkTree" .) "true") }}
- name: init-framework-scripts
  {{- include "mlrecipe.image" . | trim | nindent 2 }}
  command:
    - sh
    - -c
    - |
      set -e
      cd /tmp/framework-scripts-flat
      for key in *; do
        path=/etc/framework-scripts/$(printf '%s' "$key" | sed 's|--|/|g')
        mkdir -p "$(dirname "$path")"
        cp "$key" "$path"
      done
  volumeMounts:
    - name: framework-scripts-flat
      mountPath: /tmp/framework-scripts-flat
      readOnly: true
    - name: framework-scripts
      mountPath: /etc/framework-scripts
{{- end }}
{{- end -}}
