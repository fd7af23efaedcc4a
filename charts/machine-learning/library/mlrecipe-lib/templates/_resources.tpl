{{/*
Container resources from a {requests, limits} map; keys pass through, so nvidia.com/gpu,
vpc.amazonaws.com/efa, aws.amazon.com/neuron, aws.amazon.com/neuroncore and
aws.amazon.com/neurondevice work as well as cpu and memory.
Usage: include "mlrecipe.resources" <map with requests/limits>
*/}}
{{- define "mlrecipe.resources" -}}
{{- $r := . | default dict -}}
{{- $req := $r.requests | default dict -}}
{{- $lim := $r.limits | default dict -}}
{{- if or $req $lim }}
resources:
  {{- if $req }}
  requests:
    {{- range $k, $v := $req }}
    {{ $k | quote }}: {{ $v | toString | quote }}
    {{- end }}
  {{- end }}
  {{- if $lim }}
  limits:
    {{- range $k, $v := $lim }}
    {{ $k | quote }}: {{ $v | toString | quote }}
    {{- end }}
  {{- end }}
{{- else }}
resources: {}
{{- end }}
{{- end -}}

{{/* Number of nodes: resources.nnodes, else resources.num_nodes, else 1. */}}
{{- define "mlrecipe.nnodes" -}}
{{- $r := .Values.resources | default dict -}}
{{- if not (kindIs "invalid" $r.nnodes) }}{{ int $r.nnodes }}{{ else if not (kindIs "invalid" $r.num_nodes) }}{{ int $r.num_nodes }}{{ else }}1{{ end -}}
{{- end -}}

{{/* Processes per node: resources.nproc_per_node, else resources.procs_per_node, else 1. */}}
{{- define "mlrecipe.nprocPerNode" -}}
{{- $r := .Values.resources | default dict -}}
{{- if not (kindIs "invalid" $r.nproc_per_node) }}{{ int $r.nproc_per_node }}{{ else if not (kindIs "invalid" $r.procs_per_node) }}{{ int $r.procs_per_node }}{{ else }}1{{ end -}}
{{- end -}}
