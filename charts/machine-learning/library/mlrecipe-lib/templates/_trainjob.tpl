{{/*
Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1 TrainJob) in place of a PyTorchJob.

mlrecipe.trainingApi: "v2" when mlrecipe-lib.training_api is "v2", else "v1" (the charts' default: PyTorchJob).

mlrecipe.trainjob: a TrainJob that runs the same main container as the chart's PyTorchJob on the
ClusterTrainingRuntime mlrecipe-lib.training_runtime (default torch-distributed). The pod spec is built by
mlrecipe.podSpec, as for the PyTorchJob, and split where Trainer v2.3.0 takes each part:
  trainer: image, command, args, env, resourcesPerNode, numNodes, numProcPerNode (an integer nproc_per_node)
  runtimePatches (manager mlrecipe.io/chart), replicated job "node", its pod template:
    metadata: the pod labels and annotations; spec: nodeSelector, tolerations, volumes, and the volumeMounts
    of the runtime's container "node"
Trainer's torch plugin sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT
itself (names it refuses in trainer.env: a recipe env that sets one fails the render), as the training operator
does for a PyTorchJob.
A runtime patch cannot add init containers: a tree chart's framework scripts are a ConfigMap volume whose
items put each key at its path (read-only) instead of the init container's writable copy.
Usage: include "mlrecipe.trainjob" (dict "ctx" $ "extraEnv" <list of EnvVar maps>)
*/}}
{{- define "mlrecipe.trainingApi" -}}
{{- $lib := index .Values "mlrecipe-lib" | default dict -}}
{{- ternary "v2" "v1" (eq (toString $lib.training_api) "v2") -}}
{{- end -}}

{{- define "mlrecipe.trainjob" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $lib := index $v "mlrecipe-lib" | default dict -}}
{{- $pod := include "mlrecipe.podSpec" (dict "ctx" $ctx "container" "node" "block" "train" "runtime" true "extraEnv" .extraEnv) | fromYaml -}}
{{- $meta := include "mlrecipe.podMeta" (dict "ctx" $ctx "labels" (dict "mlrecipe.io/role" "node")) | fromYaml -}}
{{- $c := index $pod.containers 0 -}}
{{- $nproc := ($v.resources | default dict).nproc_per_node -}}
{{- range $c.env }}
{{- if has .name (list "PET_NNODES" "PET_NPROC_PER_NODE" "PET_NODE_RANK" "PET_MASTER_ADDR" "PET_MASTER_PORT") }}
{{- fail (printf "train.env sets %s: with training_api v2, Kubeflow Trainer sets it on every node and refuses a TrainJob whose env sets it (use resources.nnodes / nproc_per_node, or training_api v1)" .name) }}
{{- end }}
{{- end }}
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: {{ include "mlrecipe.name" (list $ctx "trainjob" 50) }}
  {{- include "mlrecipe.workloadMeta" $ctx | nindent 2 }}
spec:
  runtimeRef:
    apiGroup: trainer.kubeflow.org
    kind: ClusterTrainingRuntime
    name: {{ $lib.training_runtime | default "torch-distributed" | quote }}
  trainer:
    image: {{ $c.image | quote }}
    command:
      {{- toYaml $c.command | nindent 6 }}
    {{- with $c.args }}
    args:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    env:
      {{- toYaml $c.env | nindent 6 }}
    numNodes: {{ include "mlrecipe.nnodes" $ctx }}
    {{- if regexMatch "^[0-9]+$" (toString $nproc) }}
    numProcPerNode: {{ int $nproc }}
    {{- end }}
    {{- with $c.resources }}
    resourcesPerNode:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  runtimePatches:
    - manager: mlrecipe.io/chart
      trainingRuntimeSpec:
        template:
          spec:
            replicatedJobs:
              - name: node
                template:
                  spec:
                    template:
                      metadata:
                        {{- toYaml $meta | nindent 24 }}
                      spec:
                        {{- with $pod.nodeSelector }}
                        nodeSelector:
                          {{- toYaml . | nindent 26 }}
                        {{- end }}
                        {{- with $pod.tolerations }}
                        tolerations:
                          {{- toYaml . | nindent 26 }}
                        {{- end }}
                        volumes:
                          {{- include "mlrecipe.trainjobVolumes" (dict "ctx" $ctx "volumes" $pod.volumes) | nindent 26 }}
                        containers:
                          - name: node
                            volumeMounts:
                              {{- toYaml $c.volumeMounts | nindent 30 }}
{{- end -}}

{{/* The pod's volumes for a TrainJob: the framework scripts' emptyDir and flat ConfigMap become one ConfigMap
volume with items (no init container copies them). Usage: include "mlrecipe.trainjobVolumes" (dict "ctx" $ "volumes" <list>) */}}
{{- define "mlrecipe.trainjobVolumes" -}}
{{- $ctx := .ctx -}}
{{- $tree := eq (include "mlrecipe.frameworkTree" $ctx) "true" -}}
{{- $out := list -}}
{{- range .volumes -}}
{{- if and $tree (eq .name "framework-scripts") -}}
{{- $prefix := printf "scripts/%s/" (toString $ctx.Values.framework) -}}
{{- $items := list -}}
{{- range $path, $_ := $ctx.Files.Glob (include "mlrecipe.frameworkGlob" $ctx) -}}
{{- $rel := trimPrefix $prefix $path -}}
{{- $items = append $items (dict "key" ($rel | replace "/" "--") "path" $rel) -}}
{{- end -}}
{{- $out = append $out (dict "name" "framework-scripts" "configMap" (dict "name" (include "mlrecipe.name" (list $ctx "framework-scripts")) "items" $items)) -}}
{{- else if not (and $tree (eq .name "framework-scripts-flat")) -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
