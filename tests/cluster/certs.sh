# Certificates and kubeconfigs of the test cluster (sourced by up.sh after
# lib.sh). Everything is made once per cluster, with openssl, into $PKI.

_openssl_cnf() {
  cat > "$PKI/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
CNF
}

# new_ca NAME SUBJECT [SAN]: a self-signed CA (RSA, PKCS#1 key).
new_ca() {
  local name=$1 subj=$2 san=${3:-}
  openssl genrsa -traditional -out "$PKI/$name.key" 2048 2>/dev/null
  local ext=(-extensions ca)
  if [[ -n $san ]]; then
    printf '%s\n' "$(<"$PKI/openssl.cnf")" "subjectAltName = $san" > "$PKI/$name.cnf"
  else
    cp "$PKI/openssl.cnf" "$PKI/$name.cnf"
  fi
  openssl req -x509 -new -key "$PKI/$name.key" -subj "$subj" -days 3650 \
    -config "$PKI/$name.cnf" "${ext[@]}" -out "$PKI/$name.crt"
  rm -f "$PKI/$name.cnf"
}

# new_cert CA NAME SUBJECT USAGE [SAN]: a leaf signed by CA.
# USAGE is clientAuth, serverAuth or both ("serverAuth,clientAuth").
new_cert() {
  local ca=$1 name=$2 subj=$3 usage=$4 san=${5:-}
  openssl genrsa -traditional -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -config "$PKI/openssl.cnf" -out "$PKI/$name.csr"
  {
    echo "basicConstraints = critical,CA:FALSE"
    echo "keyUsage = critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage = $usage"
    [[ -z $san ]] || echo "subjectAltName = $san"
  } > "$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -extfile "$PKI/$name.ext" \
    -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

make_certs() {
  [[ -f $PKI/complete ]] && return 0
  log "making certificates in $PKI"
  rm -rf "$PKI"; mkdir -p "$PKI"; chmod 700 "$PKI"
  _openssl_cnf
  new_ca ca "/CN=kdist-test-cluster-ca"
  new_cert ca apiserver "/CN=kube-apiserver" serverAuth \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$API_SVC_IP,IP:$HOST_IP"
  new_cert ca apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  new_cert ca admin "/O=system:masters/CN=kdist-admin" clientAuth
  new_cert ca kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  new_cert ca kube-scheduler "/CN=system:kube-scheduler" clientAuth
  new_cert ca kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  new_cert ca kubelet-serving "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,IP:$HOST_IP"
  new_cert ca coredns "/CN=system:kdist:coredns" clientAuth
  new_cert ca training-operator "/CN=system:kdist:training-operator" clientAuth
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  # The operator's cert rotator accepts a CA only if it verifies for the DNS
  # name "training-operator-ca" and its key is PKCS#1, and a serving cert
  # only for training-operator.kubeflow.svc. Ours also carries the bridge IP,
  # the URL the apiserver calls the out-of-cluster webhook on.
  new_ca webhook-ca "/O=training-operator/CN=training-operator-ca" "DNS:training-operator-ca"
  new_cert webhook-ca webhook "/CN=training-operator.kubeflow.svc" serverAuth \
    "DNS:training-operator.kubeflow.svc,IP:$HOST_IP"
  rm -f "$PKI"/*.srl
  touch "$PKI/complete"
}

# write_kubeconfig FILE CERTNAME: a kubeconfig for the client cert CERTNAME.
write_kubeconfig() {
  local file=$1 user=$2
  put "$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kdist
  cluster:
    server: $API_URL
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$user.crt")
    client-key-data: $(base64 -w0 "$PKI/$user.key")
contexts:
- name: kdist
  context:
    cluster: kdist
    user: $user
    namespace: default
current-context: kdist
KC
}

make_kubeconfigs() {
  mkdir -p "$ETC"
  local u
  for u in admin kube-controller-manager kube-scheduler kubelet-client coredns training-operator; do
    write_kubeconfig "$ETC/$u.kubeconfig" "$u"
  done
}
