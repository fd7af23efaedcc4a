{{/*
KubeRay building blocks (ray.io/v1): head group, worker group, runtime env. KubeRay
injects "ray start" into the Ray containers; with "runtime" true the step runtime
ConfigMap is mounted at /etc/mlrecipe (a RayJob entrypoint runs it on the head).
*/}}

{{/* Usage: include "mlrecipe.rayHeadGroup" (dict "ctx" $ "block" "train" "runtime" true "extraVolumes" .. "extraMounts" .. "extraEnv" ..) */}}
{{- define "mlrecipe.rayHeadGroup" -}}
{{- $ctx := .ctx -}}
{{- $ray := $ctx.Values.ray | default dict -}}
{{- $rres := $ray.resources | default dict -}}
{{- $ports := list -}}
{{- $named := dict -}}
{{- range ($ray.ports | default list) }}{{ $ports = append $ports (dict "name" .name "containerPort" (int (.port | default .value))) }}{{ $_ := set $named (toString .name) true }}{{ end -}}
{{- /* KubeRay builds the head Service from the head's named ports only when some are named, and reaches the
       dashboard through its "dashboard" port (RayJob submission, RayService's Serve API): a list without it
       gets Ray's default dashboard port added. */ -}}
{{- if and $ports (not (hasKey $named "dashboard")) }}{{ $ports = append $ports (dict "name" "dashboard" "containerPort" 8265) }}{{ end -}}
{{- $env := $ray.env | default (index $ctx.Values (.block | default "none") | default dict).env | default list -}}
rayStartParams:
  dashboard-host: {{ ($ray.dashboard | default dict).host | default "0.0.0.0" | quote }}
template:
  metadata:
    {{- include "mlrecipe.podMeta" (dict "ctx" $ctx "labels" (dict "mlrecipe.io/role" "head")) | nindent 4 }}
  spec:
    {{- include "mlrecipe.podSpec" (dict "ctx" $ctx "container" "ray-head" "env" $env "extraEnv" .extraEnv "runtime" .runtime "noCommand" true
        "resources" (dict "requests" $rres.requests "limits" $rres.limits) "ports" $ports
        "tolerations" $ray.tolerations "nodeType" ($rres.node_type | default "")
        "restartPolicy" (($ray.restart_policy | default dict).head | default "")
        "extraVolumes" .extraVolumes "extraMounts" .extraMounts) | trim | nindent 4 }}
{{- end -}}

{{/* Usage: include "mlrecipe.rayWorkerGroup" (dict "ctx" $ "block" "train" "runtime" true "group" "training" "replicas" 2 "min" 2 "max" 2 "hosts" 1 "extraEnv" ..) */}}
{{- define "mlrecipe.rayWorkerGroup" -}}
{{- $ctx := .ctx -}}
{{- $ray := $ctx.Values.ray | default dict -}}
{{- $env := $ray.env | default (index $ctx.Values (.block | default "none") | default dict).env | default list -}}
- groupName: {{ .group }}
  replicas: {{ int .replicas }}
  minReplicas: {{ int .min }}
  maxReplicas: {{ int .max }}
  {{- if gt (int (.hosts | default 1)) 1 }}
  numOfHosts: {{ int .hosts }}
  {{- end }}
  rayStartParams: {}
  template:
    metadata:
      {{- include "mlrecipe.podMeta" (dict "ctx" $ctx "labels" (dict "mlrecipe.io/role" "worker")) | nindent 6 }}
    spec:
      {{- include "mlrecipe.podSpec" (dict "ctx" $ctx "container" "ray-worker" "env" $env "extraEnv" .extraEnv "runtime" .runtime "noCommand" true
          "restartPolicy" (($ray.restart_policy | default dict).worker | default "")
          "lifecycle" (dict "preStop" (dict "exec" (dict "command" (list "/bin/sh" "-c" "ray stop"))))
          "extraVolumes" .extraVolumes "extraMounts" .extraMounts) | trim | nindent 6 }}
{{- end -}}

{{/*
runtimeEnvYAML from values.ray.runtime_env_yaml: a YAML string, a runtime env map, or the
reference form {runtimeEnvYAML: <string>}.
*/}}
{{- define "mlrecipe.rayRuntimeEnv" -}}
{{- $r := (.Values.ray | default dict).runtime_env_yaml -}}
{{- if $r }}
{{- if and (kindIs "map" $r) (hasKey $r "runtimeEnvYAML") }}{{ $r = $r.runtimeEnvYAML }}{{ end -}}
{{- if not (kindIs "string" $r) }}{{ $r = toYaml $r }}{{ end }}
runtimeEnvYAML: {{ $r | quote }}
{{- end }}
{{- end -}}

{{/* A RayJob whose entrypoint runs the step runtime on the head. Usage: include "mlrecipe.rayjob" (dict "ctx" $ "block" "train" "group" "training") */}}
{{- define "mlrecipe.rayjob" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $ray := $v.ray | default dict -}}
{{- $nnodes := int (include "mlrecipe.nnodes" $ctx) -}}
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: {{ include "mlrecipe.name" (list $ctx "rayjob") }}
  {{- include "mlrecipe.workloadMeta" $ctx | nindent 2 }}
spec:
  entrypoint: python3 /etc/mlrecipe/step_runtime.py /etc/mlrecipe/step.json
  shutdownAfterJobFinishes: true
  {{- if not (kindIs "invalid" $ray.ttl_seconds_after_finished) }}
  ttlSecondsAfterFinished: {{ int $ray.ttl_seconds_after_finished }}
  {{- end }}
  {{- if not (kindIs "invalid" $v.backoff_limit) }}
  backoffLimit: {{ int $v.backoff_limit }}
  {{- end }}
  {{- with (include "mlrecipe.rayRuntimeEnv" $ctx | trim) }}
  {{- . | nindent 2 }}
  {{- end }}
  rayClusterSpec:
    rayVersion: {{ $ray.version | default "2.52.1" | quote }}
    headGroupSpec:
      {{- include "mlrecipe.rayHeadGroup" (dict "ctx" $ctx "block" .block "runtime" true) | nindent 6 }}
    workerGroupSpecs:
      {{- include "mlrecipe.rayWorkerGroup" (dict "ctx" $ctx "block" .block "runtime" true "group" .group
          "replicas" $nnodes "min" $nnodes "max" $nnodes) | nindent 6 }}
  submitterPodTemplate:
    metadata:
      {{- include "mlrecipe.podMeta" (dict "ctx" $ctx "labels" (dict "mlrecipe.io/role" "submitter")) | nindent 6 }}
    spec:
      restartPolicy: Never
      {{- $init := include "mlrecipe.frameworkInit" $ctx | trim }}
      {{- if $init }}
      volumes:
        - name: framework-scripts-flat
          configMap:
            name: {{ include "mlrecipe.name" (list $ctx "framework-scripts") }}
        - name: framework-scripts
          emptyDir: {}
      initContainers:
        {{- $init | nindent 8 }}
      {{- end }}
      containers:
        - name: ray-job-submitter
          {{- include "mlrecipe.image" $ctx | trim | nindent 10 }}
          resources:
            requests:
              cpu: 250m
              memory: 256Mi
          {{- if $init }}
          volumeMounts:
            - name: framework-scripts
              mountPath: /etc/framework-scripts
          {{- end }}
{{- end -}}
