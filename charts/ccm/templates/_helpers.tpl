{{- define "ccm.labels" -}}
app.kubernetes.io/part-of: ccm
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "ccm.image" -}}
{{ .root.Values.image.registry }}/{{ .binary }}:{{ .root.Values.image.tag }}
{{- end }}

{{- define "ccm.gatewayName" -}}
{{ .Release.Name }}-cloud-gateway
{{- end }}

{{- /* The name the controllers dial, and verify in the gateway's certificate. */}}
{{- define "ccm.gatewayHost" -}}
{{ include "ccm.gatewayName" . }}.{{ .Release.Namespace }}.svc
{{- end }}

{{- define "ccm.gatewayAddress" -}}
{{ ternary "http" "https" .Values.tls.insecurePlaintext }}://{{ include "ccm.gatewayHost" . }}:{{ .Values.gateway.grpcPort }}
{{- end }}

{{- /*
Where the certificates come from: plaintext (none), certManager, existing or generated.
Contradictory settings fail here, with what to change.
*/}}
{{- define "ccm.tlsMode" -}}
{{- $t := .Values.tls }}
{{- $existing := list }}
{{- range $key, $name := $t.existingSecrets }}
{{- if $name }}{{ $existing = append $existing (printf "tls.existingSecrets.%s" $key) }}{{ end }}
{{- end }}
{{- if $t.insecurePlaintext }}
{{- if or $t.certManager.enabled $existing }}
{{- fail (printf "tls.insecurePlaintext=true turns TLS off; it cannot go with tls.certManager.enabled or %s" (join ", " ($existing | default (list "tls.existingSecrets")))) }}
{{- end -}}
plaintext
{{- else if $t.certManager.enabled }}
{{- if $existing }}
{{- fail (printf "tls.certManager.enabled issues the certificates itself; unset %s, or turn cert-manager off to use your Secrets" (join ", " $existing)) }}
{{- end -}}
certManager
{{- else if $existing -}}
existing
{{- else -}}
generated
{{- end }}
{{- end }}

{{- /*
The components holding a certificate: `key` (of tls.existingSecrets and of the component's
values), `binary`, `sa` (its ServiceAccount: the identity in its certificate), `enabled`.
Rendered as YAML: use with fromYaml.
*/}}
{{- define "ccm.tlsComponents" -}}
components:
  - {key: gateway, binary: cloud-gateway, sa: {{ include "ccm.gatewayName" . }}, enabled: true}
  {{- range $key, $binary := dict "cloudNodeController" "cloud-node-controller" "cloudNodeLifecycleController" "cloud-node-lifecycle-controller" "serviceLbController" "service-lb-controller" "nodeRouteController" "node-route-controller" }}
  - {key: {{ $key }}, binary: {{ $binary }}, sa: {{ $.Release.Name }}-{{ $binary }}, enabled: {{ (index $.Values $key).enabled }}}
  {{- end }}
{{- end }}

{{- /* The Secret holding a component's tls.crt, tls.key and ca.crt: (dict "root" $ "key" key "binary" binary). */}}
{{- define "ccm.tlsSecretName" -}}
{{- if eq (include "ccm.tlsMode" .root) "existing" -}}
{{- $name := index .root.Values.tls.existingSecrets .key }}
{{- required (printf "tls.existingSecrets.%s: set a Secret for every enabled component when you bring your own (tls.crt, tls.key, ca.crt)" .key) $name }}
{{- else -}}
{{ .root.Release.Name }}-{{ .binary }}-tls
{{- end }}
{{- end }}

{{- /* A controller's SPIFFE ID, when cert-manager issues the certificates. */}}
{{- define "ccm.spiffeID" -}}
spiffe://{{ .root.Values.tls.certManager.trustDomain }}/ns/{{ .root.Release.Namespace }}/sa/{{ .sa }}
{{- end }}

{{- /*
The gateway's authorization policy (--authorization-policy; the format of
crates/cloud-gateway/src/auth.rs): the callers of auth.rs's default policy, named by this
release's ServiceAccounts. Every controller is listed, enabled or not, so enabling one later does
not change the policy (the gateway reads it at start-up). cert-manager's certificates carry SPIFFE
IDs, matched exactly; otherwise the bare ServiceAccount name matches a certificate whose CN is
that name (or whose SPIFFE ID ends in /sa/<name>).
*/}}
{{- define "ccm.authorizationPolicy" -}}
{{- $exact := eq (include "ccm.tlsMode" .) "certManager" }}
{{- $callers := list
  (dict "name" "node-controller" "binaries" (list "cloud-node-controller" "cloud-node-lifecycle-controller") "allow" (list "identity" "instances"))
  (dict "name" "service-controller" "binaries" (list "service-lb-controller") "allow" (list "identity" "instances" "load-balancers"))
  (dict "name" "route-controller" "binaries" (list "node-route-controller") "allow" (list "identity" "routes")) -}}
callers:
{{- range $callers }}
  - name: {{ .name }}
    identities:
    {{- range .binaries }}
    {{- $sa := printf "%s-%s" $.Release.Name . }}
      - {{ ternary (include "ccm.spiffeID" (dict "root" $ "sa" $sa)) $sa $exact | quote }}
    {{- end }}
    allow: {{ toJson .allow }}
{{- end }}
{{- end }}
