module kdist.local/k8syaml

go 1.24.0

// apimachinery at kubectl's version (tests/cluster/versions.env K8S_STAGING_VERSION);
// sigs.k8s.io/yaml at the version that apimachinery requires.
require (
	k8s.io/apimachinery v0.34.4
	sigs.k8s.io/yaml v1.6.0 // indirect
)

require (
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	sigs.k8s.io/json v0.0.0-20241014173422-cfa47c3a1cc8 // indirect
)
