{{- define "ccm.labels" -}}
app.kubernetes.io/part-of: ccm
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "ccm.image" -}}
{{ .root.Values.image.registry }}/{{ .binary }}:{{ .root.Values.image.tag }}
{{- end }}

{{- define "ccm.gatewayAddress" -}}
http://{{ .Release.Name }}-cloud-gateway.{{ .Release.Namespace }}.svc:{{ .Values.gateway.grpcPort }}
{{- end }}
