{{/*
Delivery of the one step runtime: a ConfigMap with step_runtime.py (the chart's
files/step_runtime.py, a link to src/mlrecipe/runtime/step_runtime.py) and step.json,
the step program rendered from the values, mounted at /etc/mlrecipe. The values' watchdog
block (hang detection) goes into step.json as it is; without one step.json has no watchdog. A network_check
(true or a map) goes in as a map, with resources.node_type as its node_type when it names none and efa: whether
resources requests vpc.amazonaws.com/efa (the runtime then checks the image's EFA readiness first).
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
{{- if $v.watchdog }}{{ $_ := set $prog "watchdog" $v.watchdog }}{{ end -}}
{{- if $v.network_check }}{{ $nc := dict }}{{ if kindIs "map" $v.network_check }}{{ $nc = deepCopy $v.network_check }}{{ end -}}
{{- $res := $v.resources | default dict }}{{ if not $nc.node_type }}{{ $_ := set $nc "node_type" (get $res "node_type" | default nil) }}{{ end -}}
{{- $efa := false }}{{ range $kind := list "requests" "limits" }}{{ if hasKey ((get $res $kind) | default dict) "vpc.amazonaws.com/efa" }}{{ $efa = true }}{{ end }}{{ end -}}
{{- $_ := set $nc "efa" $efa -}}
{{- $_ := set $prog "network_check" $nc }}{{ end -}}
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
Container env: MLRECIPE_RELEASE, MLRECIPE_STEP, MLRECIPE_NAMESPACE, mlrecipe-lib.pipeline_env (the
outputs of earlier pipeline steps, literal values; a name the container sets itself is skipped), the
chart's extra entries (list of EnvVar maps), and the command block's env (tpl applied to each value).
An entry whose name mlrecipe-lib.secret_env maps is rendered as a secretKeyRef (see mlrecipe.envVar).
Usage: include "mlrecipe.env" (dict "ctx" $ "env" <list of {name,value}> "extra" <list>)
*/}}
{{- define "mlrecipe.env" -}}
{{- $ctx := .ctx -}}
{{- $lib := index $ctx.Values "mlrecipe-lib" | default dict -}}
{{- $own := list "MLRECIPE_RELEASE" "MLRECIPE_STEP" "MLRECIPE_NAMESPACE" -}}
{{- range (concat (.extra | default list) (.env | default list)) }}{{ if . }}{{ $own = append $own (toString .name) }}{{ end }}{{ end -}}
env:
  - name: MLRECIPE_RELEASE
    value: {{ $ctx.Release.Name | quote }}
  - name: MLRECIPE_STEP
    value: {{ include "mlrecipe.stepName" $ctx | quote }}
  - name: MLRECIPE_NAMESPACE
    value: {{ $ctx.Release.Namespace | quote }}
  {{- range $e := ($lib.pipeline_env | default list) }}
  {{- if and $e (not (has (toString $e.name) $own)) }}
  {{- include "mlrecipe.envEntry" (dict "ctx" $ctx "e" $e "literal" true) | nindent 2 }}
  {{- end }}
  {{- end }}
  {{- range (.extra | default list) }}
  - {{ toYaml . | indent 4 | trim }}
  {{- end }}
  {{- range $e := (.env | default list) }}
  {{- if $e }}
  {{- include "mlrecipe.envEntry" (dict "ctx" $ctx "e" $e) | nindent 2 }}
  {{- end }}
  {{- end }}
{{- end -}}

{{/*
One EnvVar (JSON) from a values entry {name, value}. When mlrecipe-lib.secret_env ({name: <Secret>,
keys: {<env name>: <key>}}) maps the name: valueFrom.secretKeyRef of that Secret (the value, if any, is
ignored: mlrecipe removes it from the values and creates the Secret outside the Helm release). Else the
value, through tpl unless "literal" is true.
Usage: include "mlrecipe.envVar" (dict "ctx" $ "e" <entry> "literal" false) | fromJson
*/}}
{{- define "mlrecipe.envVar" -}}
{{- $ctx := .ctx -}}
{{- $sec := (index $ctx.Values "mlrecipe-lib" | default dict).secret_env | default dict -}}
{{- $keys := $sec.keys | default dict -}}
{{- $name := toString .e.name -}}
{{- if and $sec.name (hasKey $keys $name) -}}
{{- toJson (dict "name" $name "valueFrom" (dict "secretKeyRef" (dict "name" (toString $sec.name) "key" (toString (index $keys $name))))) -}}
{{- else -}}
{{- $val := toString (ternary "" .e.value (kindIs "invalid" .e.value)) -}}
{{- if not .literal }}{{ $val = tpl $val $ctx }}{{ end -}}
{{- toJson (dict "name" $name "value" $val) -}}
{{- end -}}
{{- end -}}

{{/* One env list item (YAML) from a values entry. Usage: include "mlrecipe.envEntry" (dict "ctx" $ "e" <entry> "literal" false) */}}
{{- define "mlrecipe.envEntry" -}}
{{- $ev := include "mlrecipe.envVar" . | fromJson -}}
- name: {{ $ev.name | quote }}
{{- if hasKey $ev "valueFrom" }}
  valueFrom:
    secretKeyRef:
      name: {{ $ev.valueFrom.secretKeyRef.name | quote }}
      key: {{ $ev.valueFrom.secretKeyRef.key | quote }}
{{- else }}
  value: {{ $ev.value | quote }}
{{- end }}
{{- end -}}

{{/* Image and pull policy: image is "repo:tag" (with image_pull_policy) or {name, pull_policy}. */}}
{{- define "mlrecipe.image" -}}
{{- $img := .Values.image -}}
{{- if kindIs "map" $img }}
image: {{ required "image.name is required: set image.name to the container image every node runs (e.g. nvcr.io/nvidia/pytorch:24.10-py3)" $img.name | quote }}
imagePullPolicy: {{ $img.pull_policy | default .Values.image_pull_policy | default "IfNotPresent" | quote }}
{{- else }}
image: {{ required "image is required: set image to the container image every node runs (e.g. nvcr.io/nvidia/pytorch:24.10-py3)" $img | quote }}
imagePullPolicy: {{ .Values.image_pull_policy | default "IfNotPresent" | quote }}
{{- end }}
{{- end -}}
