// Package check renders siding's Kubernetes overlays with kustomize's own Go API and decodes
// every object strictly into Kubernetes' API types (docs/deploy.md, "Kubernetes").
package check

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/BurntSushi/toml"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kubernetesDir is deploy/kubernetes, the parent of this module.
var kubernetesDir = func() string {
	dir, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return dir
}()

// The kinds siding's manifests may hold; any other kind fails to decode.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, rbacv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// Strict: an unknown or duplicated field is an error, not a silent drop.
var decoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// rendered is one overlay as kustomize builds it, every object decoded into its API type.
type rendered struct {
	overlay string
	objects []runtime.Object
}

func render(t *testing.T, overlay string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(kubernetesDir, "overlays", overlay))
	if err != nil {
		t.Fatalf("kustomize build overlays/%s: %v", overlay, err)
	}
	out := rendered{overlay: overlay}
	for _, resource := range resources.Resources() {
		text, err := resource.AsYAML()
		if err != nil {
			t.Fatalf("overlays/%s: %s: %v", overlay, resource.CurId(), err)
		}
		out.objects = append(out.objects, decode(t, fmt.Sprintf("overlays/%s: %s", overlay, resource.CurId()), text))
	}
	return out
}

func decode(t *testing.T, where string, text []byte) runtime.Object {
	t.Helper()
	object, _, err := decoder.Decode(text, nil, nil)
	if err != nil {
		t.Fatalf("%s does not decode strictly into a Kubernetes API type: %v", where, err)
	}
	return object
}

// only returns the one object of type T named name, exactly: a reference kustomize did not
// rewrite to a generated name (name-<hash>) finds nothing.
func only[T runtime.Object](t *testing.T, r rendered, name string) T {
	t.Helper()
	var found []T
	for _, object := range r.objects {
		if typed, ok := object.(T); ok && objectName(object) == name {
			found = append(found, typed)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("overlays/%s: want one %T named %s, found %d", r.overlay, zero, name, len(found))
	}
	return found[0]
}

func objectName(object runtime.Object) string {
	type named interface{ GetName() string }
	if n, ok := object.(named); ok {
		return n.GetName()
	}
	return ""
}

func all[T runtime.Object](r rendered) []T {
	var out []T
	for _, object := range r.objects {
		if typed, ok := object.(T); ok {
			out = append(out, typed)
		}
	}
	return out
}

// sidingConfig is the part of siding.toml these checks read.
type sidingConfig struct {
	Spark struct {
		Master        string            `toml:"master"`
		CheckpointDir string            `toml:"checkpoint_dir"`
		Conf          map[string]string `toml:"conf"`
	} `toml:"spark"`
	Control struct {
		Listen string `toml:"listen"`
	} `toml:"control"`
	Route []struct {
		Name         string `toml:"name"`
		Deadline     string `toml:"deadline"`
		DrainTimeout string `toml:"drain_timeout"`
	} `toml:"route"`
}

func parseConfig(t *testing.T, text string) sidingConfig {
	t.Helper()
	var config sidingConfig
	if _, err := toml.Decode(text, &config); err != nil {
		t.Fatalf("siding.toml: %v", err)
	}
	return config
}

func readRepoFile(t *testing.T, path ...string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(append([]string{kubernetesDir}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}
