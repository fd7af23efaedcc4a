{{/*
mlrecipe.podSpec: a complete pod spec (scheduling, volumes, the framework-scripts init container and one
main container that runs the step runtime or the given command), from the chart's values and one dict of options.

Usage: include "mlrecipe.podSpec" (dict "ctx" $ "container" "pytorch" "block" "train" "runtime" true ...)

Options (every key of the dict; any other key fails the render, so a misspelt option cannot be ignored):

  option          type      default                   meaning
  --------------  --------  ------------------------  -----------------------------------------------------------
  ctx             context   (required)                the chart's root context ($)
  container       string    (required)                name of the main container
  Main container: what it runs
  block           string    ""                        values block whose `env` the container gets: "train",
                                                      "process" or "server" ("" = none)
  runtime         bool      false                     mount the step runtime ConfigMap at /etc/mlrecipe and run it
  noCommand       bool      false                     with runtime: mount it but keep the image's command
                                                      (KubeRay containers, whose command KubeRay sets)
  program         string    "step.json"               with runtime: the step program file under /etc/mlrecipe
  command         list      (the runtime's)           explicit command; replaces the runtime command
  args            list      none                      container args
  Main container: environment, ports, probes, resources
  env             list      the block's env           [{name, value}] used instead of the block's env
  extraEnv        list      none                      more EnvVar maps, after env
  ports           list      none                      container ports, as written
  probes          string    none                      YAML of livenessProbe / readinessProbe / startupProbe
  lifecycle       map       none                      the container's lifecycle, as written
  resources       map       values.resources          {requests, limits, ...} read by mlrecipe.resources
  extraMounts     list      none                      more volumeMounts of the main container, after the
                                                      library's (shm, runtime, framework scripts, pvc, ebs)
  Pod
  restartPolicy   string    none                      the pod's restartPolicy ("" = leave it out)
  podExtra        map       none                      more pod spec fields, as written (subdomain, hostname...)
  nodeType        string    values' node type         instance type for the node selector
  tolerations     list      values.tolerations        tolerations (hyperpod's are added either way)
  plain           bool      false                     no default node selector (only nodeType's) and no
                                                      tolerations (an MPI launcher)
  extraVolumes    list      none                      more pod volumes, after the library's
  sidecars        list      none                      more containers after the main one, as written
*/}}
{{- define "mlrecipe.podSpec" -}}
{{- $options := list "ctx" "container" "block" "runtime" "noCommand" "program" "command" "args" "env" "extraEnv"
      "ports" "probes" "lifecycle" "resources" "extraMounts" "restartPolicy" "podExtra" "nodeType" "tolerations"
      "plain" "extraVolumes" "sidecars" -}}
{{- range $name, $_ := . -}}
{{- if not (has $name $options) -}}
{{- fail (printf "the library's mlrecipe.podSpec got an unknown option %q (its options: %s)" $name (join ", " $options)) -}}
{{- end -}}
{{- end -}}
{{- $ctx := required "the library's mlrecipe.podSpec needs the option ctx" .ctx -}}
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
  - name: {{ required "the library's mlrecipe.podSpec needs the option container" .container }}
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
