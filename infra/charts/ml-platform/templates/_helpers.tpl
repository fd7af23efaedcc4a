{{/* Common labels on every object of this chart. */}}
{{- define "ml-platform.labels" -}}
app.kubernetes.io/name: ml-platform
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mlrecipe
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The cluster name, required wherever discovery tags are rendered. */}}
{{- define "ml-platform.clusterName" -}}
{{- required "clusterName is required (the EKS cluster name used in karpenter.sh/discovery tags)" .Values.clusterName -}}
{{- end -}}

{{/*
An EC2NodeClass. Call with (dict "root" $ "name" NAME "pool" POOL "subnetTagKey" KEY).
*/}}
{{- define "ml-platform.ec2nodeclass" -}}
{{- $root := .root -}}
{{- $k := $root.Values.karpenter -}}
{{- $pool := .pool -}}
{{- $cluster := include "ml-platform.clusterName" $root -}}
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: {{ .name }}
  labels:
    {{- include "ml-platform.labels" $root | nindent 4 }}
spec:
  role: {{ required "karpenter.nodeRole is required (the Karpenter node IAM role name)" $k.nodeRole | quote }}
  amiSelectorTerms:
    - alias: {{ $k.amiAlias | quote }}
  subnetSelectorTerms:
    - tags:
        {{ .subnetTagKey }}: {{ $cluster | quote }}
  securityGroupSelectorTerms:
    - tags:
        {{ $k.discoveryTagKey }}: {{ $cluster | quote }}
  {{- with $pool.capacityReservation }}
  {{- if .ids }}
  capacityReservationSelectorTerms:
    {{- range .ids }}
    - id: {{ . | quote }}
    {{- end }}
  {{- end }}
  {{- end }}
  blockDeviceMappings:
    - deviceName: /dev/xvda
      rootVolume: true
      ebs:
        volumeSize: {{ $pool.rootVolumeSize | quote }}
        volumeType: gp3
        encrypted: true
        deleteOnTermination: true
  metadataOptions:
    httpEndpoint: enabled
    httpTokens: required
    httpPutResponseHopLimit: 2
  {{- if $k.maxPods }}
  kubelet:
    maxPods: {{ $k.maxPods }}
  {{- end }}
  tags:
    {{ $k.discoveryTagKey }}: {{ $cluster | quote }}
    mlrecipe.io/node-class: {{ .name | quote }}
    {{- range $key, $value := $k.tags }}
    {{ $key }}: {{ $value | quote }}
    {{- end }}
{{- end -}}

{{/*
A NodePool. Call with (dict "root" $ "name" NAME "pool" POOL "requirements" LIST).
Capacity types become ["reserved"] when the pool targets capacity reservations.
*/}}
{{- define "ml-platform.nodepool" -}}
{{- $root := .root -}}
{{- $k := $root.Values.karpenter -}}
{{- $pool := .pool -}}
{{- $reservation := dict -}}
{{- if $pool.capacityReservation }}{{ $reservation = $pool.capacityReservation }}{{ end -}}
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {{ .name }}
  labels:
    {{- include "ml-platform.labels" $root | nindent 4 }}
spec:
  template:
    metadata:
      labels:
        mlrecipe.io/node-class: {{ .name | quote }}
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: {{ .name }}
      expireAfter: Never
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
        - key: kubernetes.io/os
          operator: In
          values: ["linux"]
        - key: karpenter.sh/capacity-type
          operator: In
          {{- if $reservation.ids }}
          values: ["reserved"]
          {{- else }}
          values: {{ toJson $pool.capacityTypes }}
          {{- end }}
        {{- if and $reservation.ids $reservation.capacityBlock }}
        - key: karpenter.k8s.aws/capacity-reservation-type
          operator: In
          values: ["capacity-block"]
        {{- end }}
        {{- toYaml .requirements | nindent 8 }}
      {{- with $pool.taints }}
      taints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
  {{- with $pool.limits }}
  limits:
    {{- range $key, $value := . }}
    {{ $key }}: {{ $value | quote }}
    {{- end }}
  {{- end }}
  disruption:
    consolidationPolicy: {{ $k.consolidationPolicy }}
    consolidateAfter: {{ $k.consolidateAfter }}
{{- end -}}
