{{/* Names and labels of the chart's objects. */}}
{{- define "flotilla.fullname" -}}
{{- if contains "flotilla" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-flotilla" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "flotilla.agent" -}}{{ include "flotilla.fullname" . }}-agent{{- end -}}
{{- define "flotilla.scheduler" -}}{{ include "flotilla.fullname" . }}-scheduler{{- end -}}
{{- define "flotilla.webhookSecret" -}}{{ include "flotilla.agent" . }}-webhook-cert{{- end -}}

{{- define "flotilla.labels" -}}
app.kubernetes.io/name: flotilla
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "flotilla.selector" -}}
app.kubernetes.io/name: flotilla
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "flotilla.image" -}}
{{- $img := index .root.Values.image .component -}}
{{- $tag := default .root.Chart.AppVersion $img.tag -}}
{{- if and (eq .component "scheduler") (not $img.tag) -}}
{{- $tag = printf "%s-k8s%s" $tag (include "flotilla.schedulerMinor" .root) -}}
{{- end -}}
{{- printf "%s:%s" $img.repository $tag -}}
{{- end -}}

{{/* The Kubernetes minor of the scheduler build: scheduler.kubernetesVersion,
or the cluster's; one of the minors a build is made for. */}}
{{- define "flotilla.schedulerMinor" -}}
{{- $supported := list "1.35" "1.36" "1.37" -}}
{{- $minor := .Values.scheduler.kubernetesVersion | toString -}}
{{- $from := "scheduler.kubernetesVersion" -}}
{{- if not $minor -}}
{{- $minor = printf "%s.%s" .Capabilities.KubeVersion.Major (trimSuffix "+" .Capabilities.KubeVersion.Minor) -}}
{{- $from = printf "the cluster's version (%s)" .Capabilities.KubeVersion.Version -}}
{{- end -}}
{{- if not (has $minor $supported) -}}
{{- fail (printf "%s: Flotilla's scheduler is built for Kubernetes %s, not %s; set scheduler.kubernetesVersion to the build to run (at most one minor older than the API server)" $from (join ", " $supported) $minor) -}}
{{- end -}}
{{- $minor -}}
{{- end -}}

{{/* GOMEMLIMIT: a share of the agent's memory limit, in MiB. */}}
{{- define "flotilla.gomemlimit" -}}
{{- $limit := toString (dig "limits" "memory" "" .Values.agent.resources) -}}
{{- if and $limit (gt (int .Values.agent.gomemlimitPercent) 0) -}}
{{- $m := regexFindAll "^([0-9]+)(Ki|Mi|Gi)$" $limit 1 -}}
{{- if not $m -}}
{{- fail (printf "agent.resources.limits.memory %q: write it as a whole number of Ki, Mi or Gi to derive GOMEMLIMIT, or set agent.gomemlimitPercent to 0" $limit) -}}
{{- end -}}
{{- $n := int (regexReplaceAll "[^0-9]" $limit "") -}}
{{- $mib := $n -}}
{{- if hasSuffix "Ki" $limit }}{{ $mib = div $n 1024 }}{{ end -}}
{{- if hasSuffix "Gi" $limit }}{{ $mib = mul $n 1024 }}{{ end -}}
{{- printf "%dMiB" (div (mul $mib (int .Values.agent.gomemlimitPercent)) 100) -}}
{{- end -}}
{{- end -}}

{{/*
The webhook's namespaceSelector as a CEL condition over
variables.namespaceLabels: the namespaces whose opted-in pods the pod
webhook sees, for the policy that lets only those carry original fields.
*/}}
{{- define "flotilla.webhookNamespacesCEL" -}}
{{- $terms := list "true" -}}
{{- $sel := .Values.webhook.namespaceSelector | default dict -}}
{{- range $k, $v := ($sel.matchLabels | default dict) -}}
{{- $terms = append $terms (printf "(%s in variables.namespaceLabels && variables.namespaceLabels[%s] == %s)" (quote $k) (quote $k) (quote $v)) -}}
{{- end -}}
{{- range ($sel.matchExpressions | default list) -}}
{{- $k := quote .key -}}
{{- if eq .operator "In" -}}
{{- $terms = append $terms (printf "(%s in variables.namespaceLabels && variables.namespaceLabels[%s] in %s)" $k $k (toJson .values)) -}}
{{- else if eq .operator "NotIn" -}}
{{- $terms = append $terms (printf "(!(%s in variables.namespaceLabels) || !(variables.namespaceLabels[%s] in %s))" $k $k (toJson .values)) -}}
{{- else if eq .operator "Exists" -}}
{{- $terms = append $terms (printf "(%s in variables.namespaceLabels)" $k) -}}
{{- else if eq .operator "DoesNotExist" -}}
{{- $terms = append $terms (printf "!(%s in variables.namespaceLabels)" $k) -}}
{{- else -}}
{{- fail (printf "webhook.namespaceSelector: operator %q: want In, NotIn, Exists or DoesNotExist" .operator) -}}
{{- end -}}
{{- end -}}
{{- join " && " $terms -}}
{{- end -}}
