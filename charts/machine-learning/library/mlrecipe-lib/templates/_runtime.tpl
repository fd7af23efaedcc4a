{{/*
Delivery of the one step runtime: a ConfigMap with step_runtime.py (the chart's
files/step_runtime.py, a link to src/mlrecipe/runtime/step_runtime.py) and step.json,
the step program rendered from the values, mounted at /etc/mlrecipe.
*/}}

{{/* step.json. Usage: include "mlrecipe.stepProgram" (dict "ctx" $ "block" "train" "override" <dict or nil>) */}}
{{- define "mlrecipe.stepProgram" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $blk := index $v .block | default dict -}}
{{- $git := $v.git | default dict -}}
{{- $gitOut := dict -}}
{{- if $git.repo_url -}}
{{- $gitOut = dict "repo_url" (toString $git.repo_url) "branch" ($git.branch | default nil) "commit" ($git.commit | default nil) -}}
{{- end -}}
{{- $prog := dict
  "version" 1
  "release" $ctx.Release.Name
  "namespace" $ctx.Release.Namespace
  "step" (include "mlrecipe.stepName" $ctx)
  "chart" (include "mlrecipe.catalogName" $ctx)
  "git" (ternary $gitOut nil (gt (len $gitOut) 0))
  "inline_script" (include "mlrecipe.strings" ($v.inline_script | default list) | fromJsonArray)
  "pre_script" (include "mlrecipe.strings" ($v.pre_script | default list) | fromJsonArray)
  "command" (include "mlrecipe.strings" ($blk.command | default list) | fromJsonArray)
  "args" (include "mlrecipe.strings" ($blk.args | default list) | fromJsonArray)
  "post_script" (include "mlrecipe.strings" ($v.post_script | default list) | fromJsonArray)
-}}
{{- range $k, $val := (.override | default dict) }}{{ $_ := set $prog $k $val }}{{ end -}}
{{- toPrettyJson $prog -}}
{{- end -}}

{{/* A list as a JSON array of strings. */}}
{{- define "mlrecipe.strings" -}}
{{- $out := list -}}
{{- range . }}{{ $out = append $out (toString .) }}{{ end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The step_runtime.py source; fails the render when the chart lost its copy. */}}
{{- define "mlrecipe.runtimeSource" -}}
{{- $src := .Files.Get "files/step_runtime.py" -}}
{{- if not $src -}}
{{- fail "files/step_runtime.py is missing from the chart: it must link to src/mlrecipe/runtime/step_runtime.py" -}}
{{- end -}}
{{- $src -}}
{{- end -}}

{{/*
The runtime ConfigMap. Usage: include "mlrecipe.runtimeConfigMap" (dict "ctx" $ "block" "train" "extra" <dict of more files>)
*/}}
{{- define "mlrecipe.runtimeConfigMap" -}}
{{- $ctx := .ctx -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "mlrecipe.runtimeConfigMapName" $ctx }}
  labels:
    {{- include "mlrecipe.labels" $ctx | nindent 4 }}
data:
  step_runtime.py: {{ include "mlrecipe.runtimeSource" $ctx | quote }}
  step.json: |-
    {{- include "mlrecipe.stepProgram" . | nindent 4 }}
  {{- range $k, $val := (.extra | default dict) }}
  {{- if hasSuffix ".json" $k }}
  {{ $k }}: |-
    {{- $val | nindent 4 }}
  {{- else }}
  {{ $k }}: {{ $val | quote }}
  {{- end }}
  {{- end }}
{{- end -}}

{{/* Container command running the runtime. Usage: include "mlrecipe.runtimeCommand" "step.json" */}}
{{- define "mlrecipe.runtimeCommand" -}}
command:
  - python3
  - /etc/mlrecipe/step_runtime.py
  - /etc/mlrecipe/{{ . | default "step.json" }}
{{- end -}}

{{/*
Container env: the command block's env (tpl applied to each value), MLRECIPE_RELEASE,
MLRECIPE_STEP, MLRECIPE_NAMESPACE and the chart's extra entries (list of EnvVar maps).
Usage: include "mlrecipe.env" (dict "ctx" $ "env" <list of {name,value}> "extra" <list>)
*/}}
{{- define "mlrecipe.env" -}}
{{- $ctx := .ctx -}}
env:
  - name: MLRECIPE_RELEASE
    value: {{ $ctx.Release.Name | quote }}
  - name: MLRECIPE_STEP
    value: {{ include "mlrecipe.stepName" $ctx | quote }}
  - name: MLRECIPE_NAMESPACE
    value: {{ $ctx.Release.Namespace | quote }}
  {{- range (.extra | default list) }}
  - {{ toYaml . | indent 4 | trim }}
  {{- end }}
  {{- range $e := (.env | default list) }}
  - name: {{ $e.name | quote }}
    value: {{ tpl (toString (ternary "" $e.value (kindIs "invalid" $e.value))) $ctx | quote }}
  {{- end }}
{{- end -}}

{{/* Image and pull policy: image is "repo:tag" (with image_pull_policy) or {name, pull_policy}. */}}
{{- define "mlrecipe.image" -}}
{{- $img := .Values.image -}}
{{- if kindIs "map" $img }}
image: {{ required "image.name is required" $img.name | quote }}
imagePullPolicy: {{ $img.pull_policy | default .Values.image_pull_policy | default "IfNotPresent" | quote }}
{{- else }}
image: {{ required "image is required" $img | quote }}
imagePullPolicy: {{ .Values.image_pull_policy | default "IfNotPresent" | quote }}
{{- end }}
{{- end -}}
