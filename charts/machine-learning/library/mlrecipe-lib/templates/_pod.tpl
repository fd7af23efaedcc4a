{{/*
A pod spec built from the values: scheduling, volumes and one main container that runs
the step runtime (or the given command).
Usage: include "mlrecipe.podSpec" (dict
  "ctx" $                  root context (required)
  "container" "pytorch"    container name (required)
  "block" "train"          command block whose env is applied ("train", "process", "server")
  "runtime" true           mount /etc/mlrecipe and run the runtime
  "noCommand" false        mount the runtime but keep the image's command (KubeRay containers)
  "program" "step.json"    step program file under /etc/mlrecipe
  "command" (list ...)     explicit command (instead of the runtime)
  "args" (list ...)        explicit args
  "restartPolicy" "Never"
  "resources" <map>        {requests, limits}; default values.resources
  "extraEnv" <list>        more EnvVar maps
  "ports" <list>           container ports
  "probes" <string>        YAML of livenessProbe/readinessProbe/startupProbe
  "lifecycle" <map>
  "podExtra" <map>         extra pod spec fields (subdomain, hostname...)
  "nodeType" ""            node type override
  "tolerations" <list>     tolerations override
  "env" <list>             [{name, value}] instead of the command block's env
  "sidecars" <list>        more containers
  "plain" false            no default node selector / tolerations (e.g. an MPI launcher))
*/}}
{{- define "mlrecipe.podSpec" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $blk := dict -}}
{{- if .block }}{{ $blk = index $v .block | default dict }}{{ end -}}
{{- with .restartPolicy }}
restartPolicy: {{ . }}
{{- end }}
{{- with .podExtra }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- include "mlrecipe.schedulerName" $ctx }}
{{- if or (not .plain) .nodeType }}
{{- include "mlrecipe.nodeSelector" (dict "ctx" $ctx "nodeType" .nodeType) }}
{{- end }}
{{- if not .plain }}
{{- include "mlrecipe.tolerations" (dict "ctx" $ctx "tolerations" .tolerations) }}
{{- end }}
{{- include "mlrecipe.volumes" (dict "ctx" $ctx "runtime" .runtime "extra" .extraVolumes) | trim | nindent 0 }}
{{- with (include "mlrecipe.frameworkInit" $ctx | trim) }}
initContainers:
  {{- . | nindent 2 }}
{{- end }}
containers:
  - name: {{ .container }}
    {{- include "mlrecipe.image" $ctx | trim | nindent 4 }}
    {{- if .command }}
    command:
      {{- toYaml .command | nindent 6 }}
    {{- else if and .runtime (not .noCommand) }}
    {{- include "mlrecipe.runtimeCommand" (.program | default "step.json") | nindent 4 }}
    {{- end }}
    {{- with .args }}
    args:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- $env := .env | default ($blk.env | default list) }}
    {{- include "mlrecipe.env" (dict "ctx" $ctx "env" $env "extra" .extraEnv) | nindent 4 }}
    {{- with .ports }}
    ports:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .probes }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with .lifecycle }}
    lifecycle:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- include "mlrecipe.resources" (.resources | default $v.resources) | trim | nindent 4 }}
    {{- include "mlrecipe.volumeMounts" (dict "ctx" $ctx "runtime" .runtime "extra" .extraMounts) | nindent 4 }}
  {{- range (.sidecars | default list) }}
  - {{ toYaml . | indent 4 | trim }}
  {{- end }}
{{- end -}}
