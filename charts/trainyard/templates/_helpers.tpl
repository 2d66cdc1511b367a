{{/*
Chart name, shortened to the 63 characters a label value may hold.
*/}}
{{- define "trainyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: fullnameOverride, else the release name, followed
by the chart name unless the release name already contains it. Object names
derived from it add at most 8 characters ("-metrics"), hence 55.
*/}}
{{- define "trainyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels that identify the controller pods. Part of the Deployment's selector,
which is immutable: never add to them.
*/}}
{{- define "trainyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/*
Labels of every object: the recommended app.kubernetes.io set plus commonLabels.
Objects other than the controller pods override app.kubernetes.io/component.
*/}}
{{- define "trainyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "trainyard.selectorLabels" . }}
app.kubernetes.io/part-of: trainyard
app.kubernetes.io/version: {{ include "trainyard.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of the controller pods: trainyard.labels without helm.sh/chart and
app.kubernetes.io/managed-by, so that a chart upgrade that changes nothing in
the pod does not restart it.
*/}}
{{- define "trainyard.podLabels" -}}
{{ include "trainyard.selectorLabels" . }}
app.kubernetes.io/part-of: trainyard
app.kubernetes.io/version: {{ include "trainyard.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of an object that is not the controller: trainyard.labels with another
component. Call with (dict "root" $ "component" "metrics").
*/}}
{{- define "trainyard.componentLabels" -}}
{{- $labels := include "trainyard.labels" .root | fromYaml }}
{{- $_ := set $labels "app.kubernetes.io/component" .component }}
{{- toYaml $labels }}
{{- end }}

{{- define "trainyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "trainyard.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/*
Image reference: repository:tag, or repository@digest (with the tag kept as
documentation: repository:tag@digest) when a digest is set.
*/}}
{{- define "trainyard.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (include "trainyard.imageTag" .) }}
{{- if .Values.image.digest }}
{{- $ref = printf "%s@%s" $ref .Values.image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{- define "trainyard.metricsServiceName" -}}
{{- printf "%s-metrics" (include "trainyard.fullname" .) }}
{{- end }}

{{- define "trainyard.configMapName" -}}
{{- printf "%s-config" (include "trainyard.fullname" .) }}
{{- end }}

{{/*
Admission webhooks. The names below are passed to the controller in the
configuration file (webhook.serviceName, webhook.*WebhookConfigurationName,
webhook.certificates.secretName): the objects the chart renders and the objects
the controller keeps current are the same by construction. For the release
"trainyard" they equal the binary's defaults.
*/}}
{{- define "trainyard.webhookServiceName" -}}
{{- printf "%s-webhook" (include "trainyard.fullname" .) }}
{{- end }}

{{- define "trainyard.validatingWebhookName" -}}
{{- printf "%s-validator" (include "trainyard.fullname" .) }}
{{- end }}

{{- define "trainyard.mutatingWebhookName" -}}
{{- printf "%s-defaulter" (include "trainyard.fullname" .) }}
{{- end }}

{{/*
The Secret holding the key of create-only Secret names (sideObjects.secretNameKeySecret).
*/}}
{{- define "trainyard.secretNameKeySecretName" -}}
{{- printf "%s-secret-name-key" (include "trainyard.fullname" .) }}
{{- end }}

{{/*
The serving certificate's Secret. Provided mode names the user's Secret, so it
has no default there.
*/}}
{{- define "trainyard.webhookSecretName" -}}
{{- $c := .Values.webhook.certificates }}
{{- if eq $c.mode "Provided" }}
{{- required "webhook.certificates.secretName is required when webhook.certificates.mode is Provided: the kubernetes.io/tls Secret (tls.crt, tls.key) the admission server serves" $c.secretName }}
{{- else }}
{{- default (printf "%s-webhook-certs" (include "trainyard.fullname" .)) $c.secretName }}
{{- end }}
{{- end }}

{{/*
The ConfigMap holding webhook.certificates.caBundle as ca.crt (Provided mode),
mounted next to the Secret's pair.
*/}}
{{- define "trainyard.webhookCABundleName" -}}
{{- printf "%s-webhook-ca-bundle" (include "trainyard.fullname" .) }}
{{- end }}

{{/*
Where a mounted serving certificate is read (the binary's default certDir).
*/}}
{{- define "trainyard.webhookCertDir" -}}
/tmp/k8s-webhook-server/serving-certs
{{- end }}

{{/*
"true" when the controller keeps its own certificates: it then needs RBAC on
the Secret and on the two webhook configurations, and the configurations are
rendered without caBundle.
*/}}
{{- define "trainyard.webhookSelfManaged" -}}
{{- and .Values.webhook.enabled (eq .Values.webhook.certificates.mode "SelfManaged") }}
{{- end }}

{{/*
The cert-manager Certificate of the serving certificate (CertManager mode).
*/}}
{{- define "trainyard.webhookCertificateName" -}}
{{- printf "%s-webhook" (include "trainyard.fullname" .) }}
{{- end }}

{{/*
clientConfig of one webhook: the admission Service at path .path, with the CA
bundle in Provided mode only. SelfManaged leaves caBundle out of the manifest
altogether (the controller writes it, and a field the manifest never sets is
one `helm upgrade` never touches); CertManager leaves it to cert-manager's CA
injector. Call with (dict "root" $ "path" "/validate-...").
*/}}
{{- define "trainyard.webhookClientConfig" -}}
service:
  name: {{ include "trainyard.webhookServiceName" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- if eq .root.Values.webhook.certificates.mode "Provided" }}
caBundle: {{ required "webhook.certificates.caBundle is required when webhook.certificates.mode is Provided: the base64-encoded PEM of the CA that signed the Secret's certificate" .root.Values.webhook.certificates.caBundle }}
{{- end }}
{{- end }}

{{/*
namespaceSelector of the namespaced webhooks: webhook.namespaceSelector with
kube-system always excluded (kubernetes.io/metadata.name is set by the API
server on every namespace and cannot be changed).
*/}}
{{- define "trainyard.webhookNamespaceSelector" -}}
{{- $sel := deepCopy .Values.webhook.namespaceSelector }}
{{- $exprs := concat (get $sel "matchExpressions" | default list) (list (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" (list "kube-system"))) }}
{{- if .Values.watchNamespaces }}
{{- /* Admission reviews only what the controller watches. */}}
{{- $exprs = append $exprs (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" .Values.watchNamespaces) }}
{{- end }}
{{- $_ := set $sel "matchExpressions" $exprs }}
{{- toYaml $sel }}
{{- end }}

{{/*
Settings every webhook shares: fail closed by default, one timeout, equivalent
versions matched (a future trainer.kubeflow.org version of the same objects is
still reviewed), no side effects (so `--dry-run=server` is reviewed too).
*/}}
{{- define "trainyard.webhookSettings" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
failurePolicy: {{ .Values.webhook.failurePolicy }}
matchPolicy: Equivalent
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{- end }}

{{/*
rules of one webhook: CREATE and UPDATE of one trainer.kubeflow.org resource.
Call with (dict "resource" "trainjobs" "scope" "Namespaced").
*/}}
{{- define "trainyard.webhookRules" -}}
- apiGroups: ["trainer.kubeflow.org"]
  apiVersions: ["v1alpha1"]
  operations: ["CREATE", "UPDATE"]
  resources: [{{ .resource | quote }}]
  scope: {{ .scope }}
{{- end }}

{{/*
objectSelector of the two runtime validators (upstream's).
*/}}
{{- define "trainyard.webhookRuntimeObjectSelector" -}}
matchExpressions:
  - key: trainer.kubeflow.org/webhook-validation
    operator: NotIn
    values: ["disabled"]
{{- end }}

{{/*
Annotations of the webhook configurations: webhook.annotations, and cert-manager's
CA injection in CertManager mode, whose key webhook.annotations may not set (the
chart's value would silently replace the user's, or the user's would point the
injector at another Certificate).
*/}}
{{- define "trainyard.webhookAnnotations" -}}
{{- $annotations := deepCopy (.Values.webhook.annotations | default dict) }}
{{- if eq .Values.webhook.certificates.mode "CertManager" }}
{{- if hasKey $annotations "cert-manager.io/inject-ca-from" }}
{{- fail "webhook.annotations sets cert-manager.io/inject-ca-from, which the chart sets in webhook.certificates.mode CertManager: remove it from webhook.annotations (use mode Provided to manage the caBundle yourself)" }}
{{- end }}
{{- $_ := set $annotations "cert-manager.io/inject-ca-from" (printf "%s/%s" .Release.Namespace (include "trainyard.webhookCertificateName" .)) }}
{{- end }}
{{- with $annotations }}{{ dict "annotations" . | toYaml }}{{ end }}
{{- end }}

{{/*
"true" when the progress server runs (feature gate TrainJobStatus): it needs
the admission server's Service and certificate, so webhook.enabled too. Fails
the render on a port another endpoint uses.
*/}}
{{- define "trainyard.statusServerEnabled" -}}
{{- $on := and .Values.statusServer.enabled .Values.webhook.enabled }}
{{- if $on }}
{{- $port := int .Values.statusServer.port }}
{{- if or (has $port (list 8080 8081)) (eq $port (int .Values.webhook.port)) }}
{{- fail (printf "statusServer.port %d is taken by the controller's metrics (8080), health (8081) or webhook (%d) port" $port (int .Values.webhook.port)) }}
{{- end }}
{{- end }}
{{- ternary "true" "false" $on }}
{{- end }}

{{/*
The configuration file's featureGates: config.featureGates plus TrainJobStatus
from statusServer.enabled (setting it in config.featureGates as well is an
error: one value, one place).
*/}}
{{- define "trainyard.featureGates" -}}
{{- if hasKey .Values.config.featureGates "TrainJobStatus" }}
{{- fail "config.featureGates.TrainJobStatus: set statusServer.enabled instead" }}
{{- end }}
{{- $gates := deepCopy .Values.config.featureGates }}
{{- $_ := set $gates "TrainJobStatus" (eq (include "trainyard.statusServerEnabled" .) "true") }}
{{- toYaml $gates }}
{{- end }}

{{- define "trainyard.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{/*
"true" when the controller elects a leader. More than one replica without a
Lease would run two pipelines against the same objects, so that combination
fails the render instead of deploying.
*/}}
{{- define "trainyard.leaderElect" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicas is %d but leaderElection.enabled is false: every replica would run the pipeline. Enable leader election or set replicas to 1." (int .Values.replicas)) }}
{{- end }}
{{- ternary "true" "false" (.Values.leaderElection.enabled | default false) }}
{{- end }}

{{/*
PromQL label matchers selecting this release's series in Prometheus.
*/}}
{{- define "trainyard.promSelector" -}}
{{- with .Values.metrics.prometheusRule.selector }}
{{- . }}
{{- else }}
{{- printf "job=%q,namespace=%q" (include "trainyard.metricsServiceName" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
Fails the render when the Prometheus Operator CRD of kind .kind is unknown to
the cluster (or to `helm template`, which needs --api-versions). Call with
(dict "root" $ "kind" "ServiceMonitor" "value" "metrics.serviceMonitor.enabled").
*/}}
{{- define "trainyard.requireMonitoringAPI" -}}
{{- if not (.root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind)) }}
{{- fail (printf "%s is true but the cluster has no monitoring.coreos.com/v1 %s (install the Prometheus Operator CRDs first; with `helm template`, pass --api-versions monitoring.coreos.com/v1/%s)." .value .kind .kind) }}
{{- end }}
{{- end }}

{{/*
The controller's Configuration file. The controller decodes it strictly (an
unknown field stops it), and hack/charttest decodes it the same way.
*/}}
{{/*
The metrics port's name: https-metrics when the endpoint serves HTTPS
(metrics.secureServing), http-metrics otherwise. Fails when
metrics.auth.enabled asks for bearer tokens over plain HTTP.
*/}}
{{- define "trainyard.metricsPortName" -}}
{{- if and .Values.metrics.auth.enabled (not .Values.metrics.secureServing) }}
{{- fail "metrics.auth.enabled needs metrics.secureServing: bearer tokens must not be sent over plain HTTP; set metrics.auth.enabled=false for a plain-HTTP endpoint" }}
{{- end }}
{{- ternary "https-metrics" "http-metrics" (.Values.metrics.secureServing | default false) -}}
{{- end }}

{{- define "trainyard.config" -}}
apiVersion: config.trainyard.dev/v1alpha1
kind: Configuration
clientConnection:
  {{- toYaml .Values.config.clientConnection | nindent 2 }}
leaderElection:
  leaderElect: {{ include "trainyard.leaderElect" . }}
  resourceLock: leases
  resourceName: {{ .Values.leaderElection.leaseName | quote }}
  resourceNamespace: {{ include "trainyard.leaseNamespace" . | quote }}
  leaseDuration: {{ .Values.leaderElection.leaseDuration | quote }}
  renewDeadline: {{ .Values.leaderElection.renewDeadline | quote }}
  retryPeriod: {{ .Values.leaderElection.retryPeriod | quote }}
metrics:
  bindAddress: ":8080"
  secureServing: {{ .Values.metrics.secureServing }}
  auth:
    enabled: {{ .Values.metrics.auth.enabled }}
health:
  healthProbeBindAddress: ":8081"
stages:
  {{- toYaml .Values.config.stages | nindent 2 }}
rateLimit:
  {{- toYaml .Values.config.rateLimit | nindent 2 }}
consistency:
  {{- toYaml .Values.config.consistency | nindent 2 }}
shutdownDelay: {{ .Values.shutdownDelay | quote }}
sideObjects:
  secretNameKeySecret: {{ include "trainyard.secretNameKeySecretName" . | quote }}
{{- with .Values.watchNamespaces }}
{{- range $i, $ns := . }}
{{- if has $ns (list "kube-system" "kube-public" "kube-node-lease") }}
{{- fail (printf "watchNamespaces[%d] %q is a system namespace (kube-system, kube-public, kube-node-lease): Trainyard builds no TrainJob there and grants itself no write there; remove it" $i $ns) }}
{{- end }}
{{- end }}
watchNamespaces:
  {{- toYaml . | nindent 2 }}
{{- end }}
webhook:
{{- if .Values.webhook.enabled }}
  bindAddress: {{ printf ":%d" (int .Values.webhook.port) | quote }}
  serviceName: {{ include "trainyard.webhookServiceName" . | quote }}
  validatingWebhookConfigurationName: {{ include "trainyard.validatingWebhookName" . | quote }}
  mutatingWebhookConfigurationName: {{ include "trainyard.mutatingWebhookName" . | quote }}
  certificates:
    {{- if eq .Values.webhook.certificates.mode "SelfManaged" }}
    mode: SelfManaged
    secretName: {{ include "trainyard.webhookSecretName" . | quote }}
    {{- else }}
    # {{ .Values.webhook.certificates.mode }}: the Secret {{ include "trainyard.webhookSecretName" . }} is mounted here.
    mode: Provided
    certDir: {{ include "trainyard.webhookCertDir" . | quote }}
    {{- end }}
{{- else }}
  # webhook.enabled is false: no admission server.
  bindAddress: "0"
{{- end }}
statusServer:
{{- if eq (include "trainyard.statusServerEnabled" .) "true" }}
  bindAddress: {{ printf ":%d" (int .Values.statusServer.port) | quote }}
{{- else }}
  # The progress server is off (statusServer.enabled{{ if not .Values.webhook.enabled }}, needs webhook.enabled{{ end }}).
  bindAddress: "0"
{{- end }}
  writePeriod: {{ .Values.statusServer.writePeriod | quote }}
  qps: {{ .Values.statusServer.qps }}
  burst: {{ .Values.statusServer.burst }}
  namespaceQPS: {{ .Values.statusServer.namespaceQPS }}
  namespaceBurst: {{ .Values.statusServer.namespaceBurst }}
  maxConnections: {{ .Values.statusServer.maxConnections }}
  maxKeepAliveConnections: {{ .Values.statusServer.maxKeepAliveConnections }}
  maxReportsInFlight: {{ .Values.statusServer.maxReportsInFlight }}
  maxPendingReportBytes: {{ int64 .Values.statusServer.maxPendingReportBytes }}
featureGates:
  {{- include "trainyard.featureGates" . | nindent 2 }}
{{- end }}

{{/*
A list of strings as the elements of a CEL list literal: 'a', 'b'. The names are
Kubernetes names (no quotes or backslashes).
*/}}
{{- define "trainyard.celStrings" -}}
{{- $quoted := list }}
{{- range . }}{{ $quoted = append $quoted (printf "'%s'" .) }}{{ end }}
{{- join ", " $quoted }}
{{- end }}

{{/*
The Secret holding the ServiceMonitor's bearer token: metrics.serviceMonitor.authorization.credentials.name,
else the service-account token Secret the chart creates for <fullname>-metrics-scraper.
*/}}
{{- define "trainyard.metricsScraperSecretName" -}}
{{- default (printf "%s-metrics-scraper-token" (include "trainyard.fullname" .)) .Values.metrics.serviceMonitor.authorization.credentials.name }}
{{- end }}

{{/*
The Go duration string . ("5s", "1m30s", "500ms"; values.schema.json's pattern) in
seconds, a float.
*/}}
{{- define "trainyard.durationSeconds" -}}
{{- $seconds := 0.0 }}
{{- $perUnit := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" . -1 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $seconds = addf $seconds (mulf (float64 $number) (get $perUnit (trimPrefix $number .))) }}
{{- end }}
{{- $seconds }}
{{- end }}

{{/*
terminationGracePeriodSeconds, checked against what a stopping replica does before it
exits: it serves on for shutdownDelay, then shuts its servers down (up to 5 s) and
writes the progress reports it accepted (up to 10 s; cmd/trainyard/app/progress.go).
A shorter grace period lets the kubelet kill it mid-way, losing accepted reports or,
with a period under shutdownDelay, refusing TrainJob writes during a rolling update
(issue 38's Helm leg: "connection reset by peer" with 3 s), so the render fails.
*/}}
{{- define "trainyard.terminationGracePeriodSeconds" -}}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $delay := include "trainyard.durationSeconds" .Values.shutdownDelay | float64 }}
{{- $needed := addf $delay 15 | ceil | int }}
{{- if lt $grace $needed }}
{{- fail (printf "terminationGracePeriodSeconds %d is shorter than shutdownDelay (%s) + 15 s, the time a stopping replica takes to close its servers (up to 5 s) and write the progress reports it accepted (up to 10 s): the kubelet would kill it before. Set terminationGracePeriodSeconds to at least %d, or shorten shutdownDelay." $grace .Values.shutdownDelay $needed) }}
{{- end }}
{{- $grace }}
{{- end }}
