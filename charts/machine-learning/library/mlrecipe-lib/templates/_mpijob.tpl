{{/*
An MPIJob (kubeflow.org/v2beta1): the launcher runs mpirun (values.mpirun.args, each
through tpl; hostfile and ssh keys from the operator) over the step runtime on every slot; workers get
slotsPerWorker = processes per node and run sshd (mpirun.worker_command, default /usr/sbin/sshd -De, as the
MPI operator's examples do; an empty list keeps the image's entrypoint), never the step program: the ranks
that mpirun starts over ssh run it. Ranks started over ssh see none of the worker containers' env, so mpirun
exports (-x) the env contract, MLRECIPE_NAMESPACE, every name of the command block's env and of
mlrecipe-lib.pipeline_env (each once; names the args already export are not repeated).
Usage: include "mlrecipe.mpijob" (dict "ctx" $ "block" "process" "prefix" "mpijob")
*/}}
{{- define "mlrecipe.mpijob" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $mpi := $v.mpirun | default dict -}}
{{- $nnodes := int (include "mlrecipe.nnodes" $ctx) -}}
{{- $nproc := int (include "mlrecipe.nprocPerNode" $ctx) -}}
{{- $blk := index $v .block | default dict -}}
{{- $words := list -}}
{{- $hasNp := false -}}
{{- range ($mpi.args | default list) }}
{{- $w := tpl (toString .) $ctx -}}
{{- if has $w (list "-np" "-n" "--np" "-c") }}{{ $hasNp = true }}{{ end -}}
{{- $words = append $words $w -}}
{{- end -}}
{{- $head := list "exec" "mpirun" -}}
{{- if not $hasNp }}{{ $head = concat $head (list "-np" (toString (mul $nnodes $nproc))) }}{{ end -}}
{{- $head = concat $head (list "-x" (printf "PET_NNODES=%d" $nnodes) "-x" (printf "PET_NPROC_PER_NODE=%d" $nproc)) -}}
{{- $exported := list -}}
{{- range $i, $w := $words }}{{ if and (gt $i 0) (eq (index $words (sub $i 1)) "-x") }}{{ $exported = append $exported (regexReplaceAll "=.*$" $w "") }}{{ end }}{{ end -}}
{{- $names := list "MLRECIPE_RELEASE" "MLRECIPE_STEP" "MLRECIPE_NAMESPACE" -}}
{{- range (concat ((index $v "mlrecipe-lib" | default dict).pipeline_env | default list) ($blk.env | default list)) }}
{{- if . }}{{ $names = append $names (toString .name) }}{{ end -}}
{{- end -}}
{{- range ($names | uniq) }}
{{- if not (has . $exported) }}{{ $head = concat $head (list "-x" .) }}{{ end -}}
{{- end -}}
{{- $tail := list "python3" "/etc/mlrecipe/step_runtime.py" "/etc/mlrecipe/step.json" -}}
{{- $line := concat $head $words $tail | join " " -}}
{{- $launcherEnv := concat ($mpi.env | default list) ($blk.env | default list) -}}
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: {{ include "mlrecipe.name" (list $ctx .prefix) }}
  {{- include "mlrecipe.workloadMeta" $ctx | nindent 2 }}
spec:
  slotsPerWorker: {{ $nproc }}
  mpiImplementation: OpenMPI
  runPolicy:
    backoffLimit: {{ int ($v.backoff_limit | default 0) }}
    cleanPodPolicy: Running
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      restartPolicy: OnFailure
      template:
        metadata:
          {{- include "mlrecipe.podMeta" (dict "ctx" $ctx "labels" (dict "mlrecipe.io/role" "launcher")) | nindent 10 }}
        spec:
          {{- $lres := $mpi.resources | default (dict "requests" (dict "cpu" "250m" "memory" "256Mi")) }}
          {{- include "mlrecipe.podSpec" (dict "ctx" $ctx "container" "launcher" "env" $launcherEnv "runtime" true
                "command" (list "/bin/bash" "-c") "args" (list $line) "resources" $lres
                "nodeType" ($mpi.launcher_node_type | default "") "plain" true) | trim | nindent 10 }}
    Worker:
      replicas: {{ $nnodes }}
      restartPolicy: OnFailure
      template:
        metadata:
          {{- include "mlrecipe.podMeta" (dict "ctx" $ctx "labels" (dict "mlrecipe.io/role" "worker")) | nindent 10 }}
        spec:
          {{- $spread := dict }}
          {{- if $mpi.spread_workers }}
          {{- $match := dict "app.kubernetes.io/instance" $ctx.Release.Name "mlrecipe.io/step" (include "mlrecipe.stepName" $ctx) "mlrecipe.io/role" "worker" }}
          {{- $spread = dict "topologySpreadConstraints" (list (dict "maxSkew" 1 "topologyKey" "kubernetes.io/hostname" "whenUnsatisfiable" "DoNotSchedule" "labelSelector" (dict "matchLabels" $match))) }}
          {{- end }}
          {{- $workerCommand := list "/usr/sbin/sshd" "-De" }}
          {{- if hasKey $mpi "worker_command" }}{{ $workerCommand = $mpi.worker_command | default list }}{{ end }}
          {{- include "mlrecipe.podSpec" (dict "ctx" $ctx "container" "worker" "block" .block "runtime" true
                "command" $workerCommand "noCommand" (empty $workerCommand) "args" ($mpi.worker_args | default list)
                "podExtra" $spread) | trim | nindent 10 }}
{{- end -}}
