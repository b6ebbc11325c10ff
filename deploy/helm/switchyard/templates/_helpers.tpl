{{/* The release's full name, at most 63 characters. */}}
{{- define "switchyard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the release's pods. */}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "switchyard.labels" -}}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret holding the key files. */}}
{{- define "switchyard.secretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-keys" (include "switchyard.fullname" .)) -}}
{{- end -}}

{{/* Whether any key file is mounted. */}}
{{- define "switchyard.hasKeys" -}}
{{- if or .Values.auth.existingSecret .Values.auth.adminKey .Values.auth.hmacSecret .Values.auth.publicKeys -}}true{{- end -}}
{{- end -}}

{{/* The gateway's arguments: flags of `gateway --help`. */}}
{{- define "switchyard.args" -}}
- --addr=:{{ .Values.service.port }}
- --engine={{ .Values.engine }}
{{- if eq .Values.engine "embedded" }}
- --data-dir=/data
{{- else }}
- --nats-url={{ required "nats.url is required with engine nats" .Values.nats.url }}
- --nats-prefix={{ .Values.nats.prefix }}
- --nats-replicas={{ .Values.nats.replicas }}
{{- end }}
- --shutdown-timeout={{ sub .Values.terminationGracePeriodSeconds 5 }}s
- --log-json={{ .Values.logJSON }}
{{- $dir := "/etc/switchyard/keys" }}
{{- if .Values.auth.adminKey }}
- --admin-key-file={{ $dir }}/admin-key
{{- end }}
{{- if .Values.auth.hmacSecret }}
- --jwt-hmac-secret-file={{ $dir }}/hmac-secret
{{- end }}
{{- if .Values.auth.publicKeys }}
{{- $keys := list }}
{{- range $kid, $_ := .Values.auth.publicKeys }}
{{- $keys = append $keys (printf "%s=%s/public-%s.pem" $kid $dir $kid) }}
{{- end }}
- --jwt-public-key={{ join "," $keys }}
{{- end }}
{{- with .Values.auth.audience }}
- --jwt-audience={{ . }}
{{- end }}
{{- with .Values.auth.issuer }}
- --jwt-issuer={{ . }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The pod template of the StatefulSet and the Deployment. */}}
{{- define "switchyard.podTemplate" -}}
metadata:
  labels:
    {{- include "switchyard.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: gateway
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        {{- include "switchyard.args" . | nindent 8 }}
      {{- with .Values.extraEnv }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        - name: http
          containerPort: {{ .Values.service.port }}
          protocol: TCP
      startupProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: 2
        failureThreshold: 60
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: 10
        timeoutSeconds: 3
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: 5
        timeoutSeconds: 3
        failureThreshold: 2
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if eq .Values.engine "embedded" }}
        - name: data
          mountPath: /data
        {{- end }}
        {{- if include "switchyard.hasKeys" . }}
        - name: keys
          mountPath: /etc/switchyard/keys
          readOnly: true
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: 64Mi
    {{- if include "switchyard.hasKeys" . }}
    - name: keys
      secret:
        secretName: {{ include "switchyard.secretName" . }}
        defaultMode: 0440
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
