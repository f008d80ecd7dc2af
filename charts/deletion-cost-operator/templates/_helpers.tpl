{{/*
Object names are fixed, as in the kustomize install (deploy/), so that the
docs' names hold (the Service deletion-cost-hook, the ConfigMap
deletion-cost-hook-ca, ...) and a kustomize install can be taken over by a
release: one release per namespace.
*/}}

{{/* Labels on every object: the overlays' app.kubernetes.io/name and part-of, Helm's own. */}}
{{- define "deletion-cost.labels" -}}
app.kubernetes.io/name: deletion-cost
app.kubernetes.io/part-of: deletion-cost-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The selector of the operator's pods: the overlays' (a Deployment's selector never changes). */}}
{{- define "deletion-cost.selector" -}}
app.kubernetes.io/name: deletion-cost
{{- end }}

{{- define "deletion-cost.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/*
What the schema cannot say (it relates two values) or what needs the
cluster: refused here, with the reason.
*/}}
{{- define "deletion-cost.validate" -}}
{{- $v := .Values -}}
{{- if and (not $v.leaderElection.enabled) (gt (int $v.replicaCount) 1) -}}
{{- fail (printf "leaderElection.enabled=false needs replicaCount=1 (is %d): replicas without leader election would all write" (int $v.replicaCount)) -}}
{{- end -}}
{{- if ge (float64 $v.leaderElection.renewDeadline) (float64 $v.leaderElection.leaseDuration) -}}
{{- fail (printf "leaderElection.renewDeadline (%v) must be below leaderElection.leaseDuration (%v): a leader that cannot renew must stop writing before another may take over" $v.leaderElection.renewDeadline $v.leaderElection.leaseDuration) -}}
{{- end -}}
{{- if ge (float64 $v.leaderElection.retryPeriod) (float64 $v.leaderElection.renewDeadline) -}}
{{- fail (printf "leaderElection.retryPeriod (%v) must be below leaderElection.renewDeadline (%v)" $v.leaderElection.retryPeriod $v.leaderElection.renewDeadline) -}}
{{- end -}}
{{- if ge (int $v.operator.shutdownGrace) (int $v.terminationGracePeriodSeconds) -}}
{{- fail (printf "operator.shutdownGrace (%d) must be below terminationGracePeriodSeconds (%d): the kubelet kills the pod at the latter" (int $v.operator.shutdownGrace) (int $v.terminationGracePeriodSeconds)) -}}
{{- end -}}
{{- if and $v.podDisruptionBudget.enabled (ge (int $v.podDisruptionBudget.minAvailable) (int $v.replicaCount)) -}}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be below replicaCount (%d), or no node drain could ever evict an operator pod" (int $v.podDisruptionBudget.minAvailable) (int $v.replicaCount)) -}}
{{- end -}}
{{- if and $v.certManager.enabled (not $v.hook.enabled) -}}
{{- fail "certManager.enabled=true needs hook.enabled=true: the certificate is the hook's" -}}
{{- end -}}
{{- if and $v.prices.enabled (not $v.hook.enabled) -}}
{{- fail "prices.enabled=true needs hook.enabled=true: the scale-ins priced are the scale-in webhook's and the hook's, on its listener" -}}
{{- end -}}
{{- if and $v.scaleWebhook.enabled (not $v.hook.enabled) -}}
{{- fail "scaleWebhook.enabled=true needs hook.enabled=true: the hook's listener answers the webhook" -}}
{{- end -}}
{{- if and $v.scaleWebhook.enabled $v.networkPolicy.enabled (not $v.networkPolicy.apiServerCIDRs) -}}
{{- fail "networkPolicy.enabled with scaleWebhook.enabled needs networkPolicy.apiServerCIDRs: the addresses the API server calls the webhook from (its endpoints: kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes; or your managed control plane's range); no selector can name it" -}}
{{- end -}}
{{- if and $v.scaleWebhook.enabled (has (int $v.scaleWebhook.port) (list (int $v.hook.port) (int $v.operator.metricsPort))) -}}
{{- fail (printf "scaleWebhook.port (%d) must differ from hook.port and operator.metricsPort" (int $v.scaleWebhook.port)) -}}
{{- end -}}
{{- if and $v.scaleWebhook.enabled $v.scaleWebhook.clientCA.names (not $v.scaleWebhook.clientCA.configMap) -}}
{{- fail "scaleWebhook.clientCA.names needs scaleWebhook.clientCA.configMap: the names are checked on a certificate from that CA" -}}
{{- end -}}
{{- if and $v.scaleWebhook.enabled (le (float64 $v.scaleWebhook.timeoutSeconds) (float64 $v.hook.scaleWebhookBudget)) -}}
{{- fail (printf "scaleWebhook.timeoutSeconds (%v) must be above hook.scaleWebhookBudget (%v): the webhook answers within its budget, before the API server gives up" $v.scaleWebhook.timeoutSeconds $v.hook.scaleWebhookBudget) -}}
{{- end -}}
{{- if eq (int $v.operator.metricsPort) (int $v.hook.port) -}}
{{- fail (printf "operator.metricsPort and hook.port are both %d" (int $v.hook.port)) -}}
{{- end -}}
{{- if and $v.flowControl.enabled (gt (int $v.flowControl.handSize) (int $v.flowControl.queues)) -}}
{{- fail (printf "flowControl.handSize (%d) must be at most flowControl.queues (%d)" (int $v.flowControl.handSize) (int $v.flowControl.queues)) -}}
{{- end -}}
{{- /* A cluster-wide operator acts in every namespace: a namespace-scoped one beside it would act on the same policies. lookup answers nothing in lint and template runs. */ -}}
{{- if eq $v.scope "namespace" -}}
{{- with lookup "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" "" "deletion-cost" -}}
{{- fail (printf "scope=namespace refused: a cluster-wide install (ClusterRoleBinding deletion-cost, ServiceAccount in namespace %s) already acts in every namespace, %s included; uninstall it first, or use it" (include "deletion-cost.subjectNamespace" .) $.Release.Namespace) -}}
{{- end -}}
{{- else -}}
{{- with lookup "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" "" "deletion-cost" -}}
{{- $other := include "deletion-cost.subjectNamespace" . -}}
{{- if ne $other $.Release.Namespace -}}
{{- fail (printf "scope=cluster refused: a cluster-wide install already exists (ClusterRoleBinding deletion-cost, ServiceAccount in namespace %s); one per cluster" $other) -}}
{{- end -}}
{{- end -}}
{{- range (lookup "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" "" "").items -}}
{{- if hasPrefix "deletion-cost-cluster-reads." .metadata.name -}}
{{- fail (printf "scope=cluster refused: a namespace-scoped install exists (ClusterRoleBinding %s); a cluster-wide operator would act on its namespace too; uninstall it first" .metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The namespace of a binding's first ServiceAccount subject. */}}
{{- define "deletion-cost.subjectNamespace" -}}
{{- $ns := "" -}}
{{- range .subjects -}}
{{- if and (eq .kind "ServiceAccount") (not $ns) -}}
{{- $ns = .namespace -}}
{{- end -}}
{{- end -}}
{{- $ns -}}
{{- end }}

{{/* A number as a flag value: whole numbers without a fraction or exponent. */}}
{{- define "deletion-cost.num" -}}
{{- if eq (float64 .) (float64 (int64 .)) -}}
{{ int64 . }}
{{- else -}}
{{ . }}
{{- end -}}
{{- end }}
