{{/* Name of every object of the release (see fullnameOverride in values.yaml). */}}
{{- define "orb.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "orb.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "orb.labels" -}}
{{ include "orb.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
The managed namespaces as a JSON list, the way orb reads its provider config: `namespaces`
wins, else `namespace`, else the service account's namespace (the release namespace).
*/}}
{{- define "orb.managedNamespaces" -}}
{{- $c := .Values.provider.config -}}
{{- if $c.namespaces -}}
{{- toJson $c.namespaces -}}
{{- else if $c.namespace -}}
{{- toJson (list $c.namespace) -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the provider manages every namespace (namespaces: ["*"]). */}}
{{- define "orb.clusterWide" -}}
{{- $c := .Values.provider.config -}}
{{- if and $c.namespaces (has "*" $c.namespaces) -}}
{{- if gt (len $c.namespaces) 1 -}}
{{- fail "provider.config.namespaces: \"*\" (every namespace) must be the only entry; list namespaces, or use [\"*\"] alone" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/*
The provider's default namespace, where orb puts templates without a namespace and its
Lease: orb-k8s's K8sProviderConfig::default_namespace, with the release namespace standing in
for the service account's.
*/}}
{{- define "orb.defaultNamespace" -}}
{{- $c := .Values.provider.config -}}
{{- $listed := or (not $c.namespaces) (has "*" $c.namespaces) (has $c.namespace $c.namespaces) -}}
{{- if and $c.namespace $listed -}}
{{- $c.namespace -}}
{{- else if and $c.namespaces (not (has "*" $c.namespaces)) -}}
{{- first $c.namespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* "true" or "false": whether orb serve holds the leader Lease (leaderElection.enabled). */}}
{{- define "orb.leaderElect" -}}
{{- $v := toString .Values.leaderElection.enabled -}}
{{- if eq $v "auto" -}}
{{- ternary "true" "false" (not (empty .Values.postgres.existingSecret)) -}}
{{- else if or (eq $v "true") (eq $v "false") -}}
{{- $v -}}
{{- else -}}
{{- fail (printf "leaderElection.enabled must be auto, true or false, got %q" $v) -}}
{{- end -}}
{{- end -}}

{{/* Opt-in features that need more RBAC; each "true" or "". */}}
{{- define "orb.nodeWatch" -}}{{ if .Values.provider.config.node_watch_enabled }}true{{ end }}{{- end -}}
{{- define "orb.eventsWatch" -}}{{ if .Values.provider.config.events_watch_enabled }}true{{ end }}{{- end -}}
{{- define "orb.tokenReview" -}}{{ if or .Values.auth.enabled .Values.provider.config.inbound_auth_enabled }}true{{ end }}{{- end -}}

{{/* The rules of docs/rbac.yaml's Role: orb's permission table (crates/orb-k8s/src/rbac.rs) for
the managed namespaces; the chart tests compare every rule list here with that table. */}}
{{- define "orb.brokerRules" -}}
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get, list, watch, patch, delete]
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
- apiGroups: [""]
  resources: [services]
  verbs: [create, get, list, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [list]
- apiGroups: [apps]
  resources: [deployments, statefulsets]
  verbs: [create, get, list, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, get, list, delete]
{{- end -}}

{{- define "orb.nodeRules" -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
{{- end -}}

{{- define "orb.eventRules" -}}
- apiGroups: [""]
  resources: [events]
  verbs: [list, watch]
{{- end -}}

{{- define "orb.tokenReviewRules" -}}
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
{{- end -}}

{{- define "orb.leaseRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, patch]
{{- end -}}

{{/* The subject of every binding: the chart's ServiceAccount. */}}
{{- define "orb.subjects" -}}
- kind: ServiceAccount
  name: {{ include "orb.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* config.json: the provider entry from provider.*, auth, and the other sections of config. */}}
{{- define "orb.configJson" -}}
{{- $provider := deepCopy .Values.provider.config -}}
{{- if .Values.auth.enabled -}}
{{- $_ := set $provider "inbound_auth_enabled" true -}}
{{- end -}}
{{- $entry := dict "name" .Values.provider.name "type" "k8s" "enabled" true "default" true "config" $provider -}}
{{- with .Values.provider.templateDefaults -}}
{{- $_ := set $entry "template_defaults" . -}}
{{- end -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "providers" (list $entry) -}}
{{- if or .Values.auth.roles .Values.auth.defaultRole -}}
{{- $auth := dict "roles" .Values.auth.roles -}}
{{- with .Values.auth.defaultRole -}}
{{- $_ := set $auth "default_role" . -}}
{{- end -}}
{{- $serve := get $config "serve" | default dict -}}
{{- $_ := set $serve "auth" $auth -}}
{{- $_ := set $config "serve" $serve -}}
{{- end -}}
{{- toPrettyJson $config -}}
{{- end -}}
