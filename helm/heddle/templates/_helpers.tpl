{{/* Names, labels and the generated configuration shared by every template. */}}

{{- define "heddle.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release-scoped prefix of every object name. */}}
{{- define "heddle.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "heddle.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. Call with (dict "ctx" $ "component" "ingester"). */}}
{{- define "heddle.labels" -}}
helm.sh/chart: {{ include "heddle.chart" .ctx }}
{{ include "heddle.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: heddle
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels that select the pods of one component (and of one zone when "zone" is set). */}}
{{- define "heddle.selectorLabels" -}}
app.kubernetes.io/name: {{ include "heddle.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- with .zone }}
heddle.io/zone: {{ . }}
{{- end }}
{{- end -}}

{{- define "heddle.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "heddle.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "heddle.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "heddle.distributed" -}}
{{- if eq .Values.mode "distributed" -}}true{{- end -}}
{{- end -}}

{{- define "heddle.s3" -}}
{{- if eq .Values.storage.backend "s3" -}}true{{- end -}}
{{- end -}}

{{/* DNS name of the headless gossip service, the seed list of every member. */}}
{{- define "heddle.gossipAddress" -}}
{{- printf "%s-gossip-ring.%s.svc.%s:%d" (include "heddle.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.memberlist.port) -}}
{{- end -}}

{{/*
The YAML configuration, in Mimir's layout (docs/configuration.md). Both modes keep the TSDB under /data/tsdb,
the queriers' index headers of bucket blocks under /data/tsdb-sync (the single-node pod's volume, the querier pods'
emptyDir, which outlives a container restart) and the compactor's scratch space under /data/compactor (the
single-node pod's volume, the compactor pod's emptyDir),
and cut, retain and ship blocks the same way; single-node ships them to a filesystem bucket on the same volume
(/data/blocks), distributed mode to S3 and adds the ring and gossip keys. The chart tests start the real binary
with every rendered key (only paths, ports and the gossip seed are swapped for local ones).
*/}}
{{- define "heddle.config" -}}
{{- $v := .Values -}}
{{- $c := $v.config -}}
{{- $tsdb := dict
  "dir" "/data/tsdb"
  "wal_compression_enabled" $c.tsdb.walCompressionEnabled
  "memory_snapshot_on_shutdown" $c.tsdb.memorySnapshotOnShutdown
  "block_ranges_period" $c.tsdb.blockRangesPeriod
  "retention_period" $c.tsdb.retentionPeriod
  "ship_interval" $c.tsdb.shipInterval
  "head_compaction_idle_timeout" $c.tsdb.headCompactionIdleTimeout
  "flush_blocks_on_shutdown" $c.tsdb.flushBlocksOnShutdown -}}
{{- $blocks := dict "tsdb" $tsdb "bucket_store" (dict "sync_interval" $c.bucketStore.syncInterval "sync_dir" "/data/tsdb-sync") -}}
{{- $cfg := dict
  "multitenancy_enabled" $c.multitenancyEnabled
  "server" (dict
    "http_listen_port" (int $v.ports.http)
    "grpc_listen_port" (int $v.ports.grpc)
    "log_level" $c.logLevel
    "log_format" $c.logFormat)
  "limits" (dict
    "ingestion_rate" $c.limits.ingestionRate
    "ingestion_burst_size" (int64 $c.limits.ingestionBurstSize)
    "max_label_names_per_series" (int $c.limits.maxLabelNamesPerSeries)
    "max_label_name_length" (int $c.limits.maxLabelNameLength)
    "max_label_value_length" (int $c.limits.maxLabelValueLength)
    "creation_grace_period" $c.limits.creationGracePeriod)
  "distributor" (dict
    "max_recv_msg_size" (int64 $c.distributor.maxRecvMsgSize)
    "remote_timeout" $c.distributor.remoteTimeout)
  "querier" (dict
    "query_timeout" $c.querier.queryTimeout
    "max_samples_per_query" (int64 $c.querier.maxSamplesPerQuery))
  "blocks_storage" $blocks
  "compactor" (dict "data_dir" "/data/compactor")
-}}
{{- if include "heddle.s3" . -}}
{{- $s3 := $v.storage.s3 -}}
{{- $_ := set $blocks "backend" "s3" -}}
{{- $_ := set $blocks "s3" (dict "endpoint" $s3.endpoint "bucket_name" $s3.bucketName "region" $s3.region "insecure" $s3.insecure) -}}
{{- else -}}
{{- /* single-node only (checked): the bucket is a directory on the pod's own volume, so blocks survive
restarts but not the loss of that volume. */ -}}
{{- $_ := set $blocks "backend" "filesystem" -}}
{{- $_ := set $blocks "filesystem" (dict "dir" "/data/blocks") -}}
{{- end -}}
{{- with $v.adminToken.existingSecret.name -}}
{{- $_ := set $cfg.server "admin_token_file" (include "heddle.adminTokenFile" $) -}}
{{- end -}}
{{- if $v.grpcTls.existingSecret.name -}}
{{- $_ := set $cfg.server "grpc_tls_config" (dict
  "cert_file" "/etc/heddle-tls/tls.crt"
  "key_file" "/etc/heddle-tls/tls.key"
  "client_auth_type" $v.grpcTls.clientAuth
  "client_ca_file" "/etc/heddle-tls/ca.crt") -}}
{{- $_ := set $cfg "ingester_client" (dict "grpc_client_config" (dict
  "tls_enabled" true
  "tls_cert_path" "/etc/heddle-tls/tls.crt"
  "tls_key_path" "/etc/heddle-tls/tls.key"
  "tls_ca_path" "/etc/heddle-tls/ca.crt"
  "tls_server_name" $v.grpcTls.serverName)) -}}
{{- end -}}
{{- if include "heddle.distributed" . -}}
{{- $_ := set $cfg.server "cluster_token_file" (include "heddle.clusterTokenFile" $) -}}
{{- $ring := dict
  "replication_factor" (int $v.ingester.replicationFactor)
  "zone_awareness_enabled" $v.ingester.zoneAwareness.enabled
  "num_tokens" (int $v.ingester.numTokens)
  "tokens_file_path" "/data/tokens"
  "unregister_on_shutdown" $v.ingester.unregisterOnShutdown -}}
{{- $_ := set $cfg "ingester" (dict "ring" $ring) -}}
{{- /* The cluster label keeps two releases' gossip apart even if their seeds ever overlap. */ -}}
{{- $_ := set $cfg "memberlist" (dict "bind_port" (int $v.memberlist.port) "join_members" (list (include "heddle.gossipAddress" .)) "cluster_label" (printf "%s.%s" .Release.Namespace (include "heddle.fullname" .))) -}}
{{- if include "heddle.gossipKey" . -}}
{{- $_ := set $cfg.memberlist "cluster_key_file" (printf "/etc/heddle-gossip/%s" (include "heddle.gossipKeyItem" .)) -}}
{{- end -}}
{{- end -}}
{{- toYaml (mergeOverwrite $cfg (deepCopy $c.extra)) -}}
{{- end -}}

{{/* The Secret holding the cluster token: the operator's, or the one the chart generates. */}}
{{- define "heddle.clusterTokenSecret" -}}
{{- .Values.clusterToken.existingSecret.name | default (printf "%s-cluster-token" (include "heddle.fullname" .)) -}}
{{- end -}}

{{/* Where the cluster token is mounted (distributed mode). */}}
{{- define "heddle.clusterTokenFile" -}}
{{- printf "/etc/heddle-cluster/%s" (ternary .Values.clusterToken.existingSecret.key "token" (not (empty .Values.clusterToken.existingSecret.name))) -}}
{{- end -}}

{{/* "true" when gossip is signed with a cluster key (distributed mode with memberlist.clusterKey.enabled). */}}
{{- define "heddle.gossipKey" -}}
{{- if and (include "heddle.distributed" .) .Values.memberlist.clusterKey.enabled -}}true{{- end -}}
{{- end -}}

{{/* The Secret holding the gossip key: the operator's, or the one the chart generates. */}}
{{- define "heddle.gossipKeySecret" -}}
{{- .Values.memberlist.clusterKey.existingSecret.name | default (printf "%s-gossip-key" (include "heddle.fullname" .)) -}}
{{- end -}}

{{/* The gossip key's item in that Secret. */}}
{{- define "heddle.gossipKeyItem" -}}
{{- if .Values.memberlist.clusterKey.existingSecret.name -}}{{ .Values.memberlist.clusterKey.existingSecret.key }}{{- else -}}key{{- end -}}
{{- end -}}

{{/* Where the admin token Secret is mounted. */}}
{{- define "heddle.adminTokenFile" -}}
{{- printf "/etc/heddle-admin/%s" .Values.adminToken.existingSecret.key -}}
{{- end -}}

{{/* Pod annotations that roll every pod when the configuration changes. */}}
{{- define "heddle.podAnnotations" -}}
checksum/config: {{ include "heddle.config" . | sha256sum }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Resources of one component: the values' `resources` when set, else sized from `capacity` (README.md, "Sizing":
Heddle's own measured figures plus headroom), else nothing. Call with (dict "ctx" $ "component" "ingester"
"resources" .Values.ingester.resources "pods" <number of pods>).
*/}}
{{- define "heddle.resources" -}}
{{- $v := .ctx.Values -}}
{{- $cap := $v.capacity -}}
{{- if .resources -}}
{{- toYaml .resources -}}
{{- else if and (gt (int64 $cap.activeSeries) 0) (ne .component "querier") -}}
{{- $pods := max 1 (int64 .pods) -}}
{{- $factor := divf (add 100 (int64 $cap.headroomPercent)) 100 -}}
{{- $active := int64 $cap.activeSeries -}}
{{- $scrape := max 1 (int64 $cap.scrapeIntervalSeconds) -}}
{{- $rate := 0.0 -}}
{{- $memBytes := 0.0 -}}
{{- if or (eq .component "ingester") (eq .component "single-node") -}}
{{- $rf := 1 -}}
{{- if eq .component "ingester" }}{{ $rf = int64 $v.ingester.replicationFactor }}{{ end -}}
{{- /* in-memory series per pod = active x RF / pods; each costs bytesPerSeries of RSS and brings one sample per scrape */ -}}
{{- $series := divf (mul $active $rf) $pods -}}
{{- $memBytes = addf $memBytes (mulf $series $cap.bytesPerSeries) -}}
{{- $rate = divf $series $scrape -}}
{{- end -}}
{{- if or (eq .component "distributor") (eq .component "single-node") -}}
{{- /* samples/s per pod = active / scrape interval / pods; request buffers grow with the rate */ -}}
{{- $received := divf (divf $active $scrape) $pods -}}
{{- $memBytes = addf $memBytes (mulf $received $cap.distributorBytesPerSamplePerSecond) -}}
{{- /* one process does both halves: the measured CPU figure already covers them together */ -}}
{{- if eq .component "distributor" }}{{ $rate = $received }}{{ end -}}
{{- end -}}
{{- $cpuMilli := int64 (ceil (mulf $rate $cap.cpuSecondsPerMillionSamples $factor 0.001)) -}}
{{- $memMi := add (int64 $cap.baseMemoryMi) (int64 (ceil (divf (mulf $memBytes $factor) 1048576))) -}}
requests:
  cpu: {{ printf "%dm" (max 100 $cpuMilli) }}
  memory: {{ printf "%dMi" (max 128 $memMi) }}
limits:
  memory: {{ printf "%dMi" (max 128 $memMi) }}
{{- end -}}
{{- end -}}

{{/*
Disk per ingester from `capacity`: Mimir's 5 GB per 300,000 in-memory series plus headroom, at least 10Gi (our
own estimate from the measured WAL bytes per sample lands within 20 % of it; README.md, "Sizing").
*/}}
{{- define "heddle.ingesterDisk" -}}
{{- $v := .ctx.Values -}}
{{- if .size -}}
{{- .size -}}
{{- else if gt (int64 $v.capacity.activeSeries) 0 -}}
{{- $pods := max 1 (int64 .pods) -}}
{{- $series := div (add (mul (int64 $v.capacity.activeSeries) (int64 .rf)) (sub $pods 1)) $pods -}}
{{- $gi := div (add (mul $series 5 (add 100 (int64 $v.capacity.headroomPercent))) 29999999) 30000000 -}}
{{- printf "%dGi" (max 10 $gi) -}}
{{- else -}}
10Gi
{{- end -}}
{{- end -}}

{{/* Total ingester pods across zones. */}}
{{- define "heddle.ingesterPods" -}}
{{- if .Values.ingester.zoneAwareness.enabled -}}
{{- mul (len .Values.ingester.zoneAwareness.zones) (int .Values.ingester.replicasPerZone) -}}
{{- else -}}
{{- int .Values.ingester.replicas -}}
{{- end -}}
{{- end -}}

{{/* Cross-field checks JSON schema cannot express with a useful message. */}}
{{- define "heddle.validate" -}}
{{- if and .Values.grpcTls.existingSecret.name (not .Values.grpcTls.serverName) -}}
{{- fail "grpcTls.serverName is required with grpcTls.existingSecret.name: it is the name distributors, queriers and the preStop hook verify in the ingesters' certificate (the ring holds pod IPs, which the certificate does not name)" -}}
{{- end -}}
{{- if and (include "heddle.distributed" .) .Values.adminToken.existingSecret.name .Values.ingester.prepareDownscale.enabled -}}
{{- fail "adminToken.existingSecret.name is set but ingester.prepareDownscale.enabled=true: the rollout-operator calls /ingester/prepare-shutdown without a token and every scale-down would be refused; set ingester.prepareDownscale.enabled=false (scale down by hand or with ingester.preStopPrepareShutdown) or drop the token" -}}
{{- end -}}
{{- if and (include "heddle.s3" .) (not .Values.storage.s3.bucketName) -}}
{{- fail "storage.s3.bucketName is required when storage.backend=s3" -}}
{{- end -}}
{{- if include "heddle.distributed" . -}}
{{- if not .Values.memberlist.clusterKey.enabled -}}
{{- fail "memberlist.clusterKey.enabled=false: distributed mode gives every pod the cluster token (server.cluster_token_file), which distributors and queriers send with every call to whatever the ring calls an ingester, so gossip must be signed or anything that reaches the gossip port could join as an ingester and collect the token; heddle refuses to start that way. Keep memberlist.clusterKey.enabled=true (the generated key, or memberlist.clusterKey.existingSecret.name)" -}}
{{- end -}}
{{- if ne .Values.storage.backend "s3" -}}
{{- fail (printf "storage.backend=%q: the filesystem backend is for mode=single-node demos only; distributed mode ships blocks to object storage, set storage.backend=s3 with storage.s3.bucketName (and storage.s3.endpoint unless it is AWS)" .Values.storage.backend) -}}
{{- end -}}
{{- if .Values.ingester.zoneAwareness.enabled -}}
{{- if lt (len .Values.ingester.zoneAwareness.zones) (int .Values.ingester.replicationFactor) -}}
{{- fail (printf "ingester.zoneAwareness.zones has %d zones but ingester.replicationFactor=%d: zone awareness needs at least one zone per replica" (len .Values.ingester.zoneAwareness.zones) (int .Values.ingester.replicationFactor)) -}}
{{- end -}}
{{- else if lt (int .Values.ingester.replicas) (int .Values.ingester.replicationFactor) -}}
{{- fail (printf "ingester.replicas=%d is below ingester.replicationFactor=%d: every series needs that many distinct ingesters" (int .Values.ingester.replicas) (int .Values.ingester.replicationFactor)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Environment of every container: pod identity for flags, S3 credentials from an existing Secret. */}}
{{- define "heddle.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- $sec := .Values.storage.s3.existingSecret -}}
{{- if and (include "heddle.s3" .) $sec.name }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $sec.name }}
      key: {{ $sec.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $sec.name }}
      key: {{ $sec.secretAccessKeyKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Flags every distributed-mode process gets after --config.file. */}}
{{- define "heddle.clusterArgs" -}}
- --memberlist.bind-addr=$(POD_IP)
{{- with include "heddle.s3Args" . }}
{{ . }}
{{- end }}
{{- end -}}

{{/* The S3 keys from the existing Secret, as flags: they never enter the ConfigMap. */}}
{{- define "heddle.s3Args" -}}
{{- if and (include "heddle.s3" .) .Values.storage.s3.existingSecret.name -}}
- --blocks-storage.s3.access-key-id=$(AWS_ACCESS_KEY_ID)
- --blocks-storage.s3.secret-access-key=$(AWS_SECRET_ACCESS_KEY)
{{- end -}}
{{- end -}}

{{/* Container ports shared by every role. */}}
{{- define "heddle.containerPorts" -}}
- name: http-metrics
  containerPort: {{ .Values.ports.http }}
  protocol: TCP
- name: grpc
  containerPort: {{ .Values.ports.grpc }}
  protocol: TCP
{{- if include "heddle.distributed" . }}
- name: gossip-udp
  containerPort: {{ .Values.memberlist.port }}
  protocol: UDP
{{- end }}
{{- end -}}

{{/* Volumes mounted by every pod: the config, and a writable /tmp under the read-only root filesystem. */}}
{{- define "heddle.volumeMounts" -}}
- name: config
  mountPath: /etc/heddle
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: /data
{{- if .Values.adminToken.existingSecret.name }}
- name: admin-token
  mountPath: /etc/heddle-admin
  readOnly: true
{{- end }}
{{- if .Values.grpcTls.existingSecret.name }}
- name: grpc-tls
  mountPath: /etc/heddle-tls
  readOnly: true
{{- end }}
{{- if include "heddle.distributed" . }}
- name: cluster-token
  mountPath: /etc/heddle-cluster
  readOnly: true
{{- end }}
{{- if include "heddle.gossipKey" . }}
- name: gossip-key
  mountPath: /etc/heddle-gossip
  readOnly: true
{{- end }}
{{- end -}}

{{- define "heddle.volumes" -}}
- name: config
  configMap:
    name: {{ include "heddle.fullname" . }}-config
- name: tmp
  emptyDir: {}
{{- with .Values.adminToken.existingSecret }}
{{- if .name }}
- name: admin-token
  secret:
    secretName: {{ .name }}
    defaultMode: 0440
    items:
      - key: {{ .key }}
        path: {{ .key }}
{{- end }}
{{- end }}
{{- if include "heddle.distributed" . }}
{{- $key := ternary .Values.clusterToken.existingSecret.key "token" (not (empty .Values.clusterToken.existingSecret.name)) }}
- name: cluster-token
  secret:
    secretName: {{ include "heddle.clusterTokenSecret" . }}
    defaultMode: 0440
    items:
      - key: {{ $key }}
        path: {{ $key }}
{{- end }}
{{- with .Values.grpcTls.existingSecret.name }}
- name: grpc-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- if include "heddle.gossipKey" . }}
- name: gossip-key
  secret:
    secretName: {{ include "heddle.gossipKeySecret" . }}
    defaultMode: 0440
    items:
      - key: {{ include "heddle.gossipKeyItem" . }}
        path: {{ include "heddle.gossipKeyItem" . }}
{{- end }}
{{- end -}}

{{- define "heddle.readinessProbe" -}}
readinessProbe:
  httpGet:
    path: /ready
    port: http-metrics
  initialDelaySeconds: {{ .Values.readinessProbe.initialDelaySeconds }}
  periodSeconds: {{ .Values.readinessProbe.periodSeconds }}
  timeoutSeconds: {{ .Values.readinessProbe.timeoutSeconds }}
  failureThreshold: {{ .Values.readinessProbe.failureThreshold }}
{{- end -}}

{{- define "heddle.podSpecCommon" -}}
serviceAccountName: {{ include "heddle.serviceAccountName" . }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}
