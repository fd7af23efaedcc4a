{{/* Settings of this chart, as JSON: names, paths and ports (reference keys with their defaults). */}}
{{- define "jupyter.settings" -}}
{{- $v := .Values -}}
{{- $g := $v.global | default dict -}}
{{- $j := $v.jupyter | default dict -}}
{{- $tb := $v.tensorboard | default dict -}}
{{- $ng := $v.nginx | default dict -}}
{{- $name := include "mlrecipe.name" (list . "") -}}
{{- $mount := printf "/%s" ($g.shared_fs | default "fsx") -}}
{{- $logDir := $mount -}}
{{- with $g.log_dir }}{{ $logDir = printf "%s/%s" $mount (trimAll "/" (toString .)) }}{{ end -}}
{{- $mounted := false -}}
{{- range ($v.pvc | default list) }}{{ if eq (trimSuffix "/" .mount_path) $mount }}{{ $mounted = true }}{{ end }}{{ end -}}
{{- $img := $v.image -}}
{{- if kindIs "map" $img }}{{ $img = $img.name }}{{ end -}}
{{- toJson (dict
  "name" $name
  "mount" $mount
  "logDir" $logDir
  "sharedPvc" (ternary "" ($g.shared_pvc | default "" | toString) $mounted)
  "sourceCidr" ($g.source_cidr | default "" | toString)
  "rootDir" ($j.root_dir | default $mount | toString)
  "jupyterName" ($j.name | default "jupyter" | toString)
  "jupyterPort" (int ($j.port | default 443))
  "jupyterTarget" (int ($j.target_port | default 8888))
  "tokenSecret" ($j.token_secret | default (printf "%s-jupyter-token" $name) | toString)
  "nodeType" (include "mlrecipe.nodeType" . | default ($j.gpu_instance_type | default "") | toString)
  "tbName" ($tb.name | default "tensorboard" | toString)
  "tbPort" (int ($tb.port | default 6443))
  "tbTarget" (int ($tb.target_port | default 6443))
  "tbUpstream" (int ($tb.upstream_port | default 6006))
  "nginxName" ($ng.name | default "nginx" | toString)
  "nginxImage" ($ng.image | default $img | toString)
  "image" (toString $img)
  "cert" ($ng.ssl_certificate | default "/etc/ssl/mlrecipe/tls.crt" | toString)
  "key" ($ng.ssl_certificate_key | default "/etc/ssl/mlrecipe/tls.key" | toString)
  "tlsSecret" ($ng.tls_secret | default (printf "%s-tls" $name) | toString)
  "user" ($ng.user | default "tensorboard" | toString)
  "htpasswd" ($ng.htpasswd | default "" | toString)
  "htpasswdSecret" ($ng.htpasswd_secret | default (printf "%s-htpasswd" $name) | toString)
) -}}
{{- end -}}
