package check

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The image's contract (the image is built and run by the image test).
const (
	image          = "localhost/siding:0.1.0"
	imageUser      = 10001
	checkpointPath = "/var/lib/siding"
	configPath     = "/etc/siding/siding.toml"
	// Spark's own stop after the drain (queries, then the session): 24 s measured on a loaded
	// two-core machine (docs/deploy.md, "Kubernetes").
	sparkStop = 30 * time.Second
	// siding.config.models.DRAIN_SLACK_S: the default drain_timeout is the deadline plus this.
	drainSlack = 2 * time.Second
)

// Each overlay and the siding.toml its ConfigMap must hold.
var overlays = map[string]string{
	"local":     "base/siding.toml",
	"spark-k8s": "overlays/spark-k8s/siding.toml",
}

func TestOverlays(t *testing.T) {
	for overlay, tomlPath := range overlays {
		t.Run(overlay, func(t *testing.T) {
			r := render(t, overlay)
			checkProxy(t, r, readRepoFile(t, tomlPath))
			checkMonitoring(t, r)
			if overlay == "spark-k8s" {
				checkSparkOnKubernetes(t, r)
			} else if len(all[*rbacv1.Role](r)) != 0 {
				t.Errorf("local mode needs no access to the Kubernetes API, yet grants a Role")
			}
		})
	}
}

// checkProxy: the Deployment, its config, secrets, probes, Service, PDB and volume.
func checkProxy(t *testing.T, r rendered, tomlText string) {
	deployment := only[*appsv1.Deployment](t, r, "siding")
	spec := deployment.Spec
	if spec.Replicas == nil || *spec.Replicas != 1 {
		t.Errorf("replicas: want 1 (a checkpoint has one writer)")
	}
	if spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy: want Recreate, got %q", spec.Strategy.Type)
	}
	pod := spec.Template
	selector, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if err != nil || !selector.Matches(labels.Set(pod.Labels)) {
		t.Fatalf("the Deployment's selector does not select its own pods: %v", err)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	container := pod.Spec.Containers[0]
	if container.Image != image {
		t.Errorf("image: want %s, got %s", image, container.Image)
	}
	if want := []string{"run", "-c", configPath}; !slices.Equal(container.Args, want) {
		t.Errorf("args: want %v, got %v", want, container.Args)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != imageUser ||
		sc.FSGroup == nil || *sc.FSGroup != imageUser {
		t.Errorf("the pod must run as the image's user %d, with fsGroup %d for the checkpoint", imageUser, imageUser)
	}

	// The ConfigMap mounted at /etc/siding holds the repository's siding.toml, byte for byte.
	configMap := mountedConfigMap(t, r, pod.Spec, container, path.Dir(configPath))
	if got := configMap.Data[path.Base(configPath)]; got != tomlText {
		t.Fatalf("ConfigMap %s: siding.toml differs from the file in the repository", configMap.Name)
	}
	config := parseConfig(t, tomlText)

	// The control API listens on every interface, on the port the probes, Service and
	// Prometheus use.
	host, portText, err := net.SplitHostPort(config.Control.Listen)
	if err != nil || (host != "0.0.0.0" && host != "::") {
		t.Fatalf("[control] listen = %q: in a pod it must be 0.0.0.0:PORT", config.Control.Listen)
	}
	listenPort, _ := strconv.Atoi(portText)
	probes := map[string]*corev1.Probe{
		"startupProbe":   container.StartupProbe,
		"livenessProbe":  container.LivenessProbe,
		"readinessProbe": container.ReadinessProbe,
	}
	wantPath := map[string]string{"startupProbe": "/health", "livenessProbe": "/health", "readinessProbe": "/ready"}
	for name, probe := range probes {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s: want an HTTP GET probe", name)
			continue
		}
		if probe.HTTPGet.Path != wantPath[name] {
			t.Errorf("%s: path %s, want %s", name, probe.HTTPGet.Path, wantPath[name])
		}
		if got := containerPort(t, container, probe.HTTPGet.Port); got != listenPort {
			t.Errorf("%s: port %d, but siding listens on %d", name, got, listenPort)
		}
	}
	annotations := pod.Annotations
	if annotations["prometheus.io/scrape"] != "true" || annotations["prometheus.io/path"] != "/metrics" ||
		annotations["prometheus.io/port"] != strconv.Itoa(listenPort) {
		t.Errorf("Prometheus annotations must scrape /metrics on %d: %v", listenPort, annotations)
	}

	service := only[*corev1.Service](t, r, "siding")
	checkSelects(t, "Service siding", service.Spec.Selector, pod.Labels)
	if len(service.Spec.Ports) != 1 || containerPort(t, container, service.Spec.Ports[0].TargetPort) != listenPort {
		t.Errorf("Service siding must reach the control API's port %d", listenPort)
	}

	pdb := only[*policyv1.PodDisruptionBudget](t, r, "siding")
	pdbSelector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !pdbSelector.Matches(labels.Set(pod.Labels)) {
		t.Errorf("the PodDisruptionBudget does not select siding's pod")
	}

	// Every ${VAR} siding.toml needs is in the container's environment.
	checkEnvironment(t, r, container, tomlText)

	// The checkpoint lives on the claim, under the image's volume.
	claim := mountedClaim(t, r, pod.Spec, container, checkpointPath)
	if !strings.HasPrefix(config.Spark.CheckpointDir+"/", checkpointPath+"/") {
		t.Errorf("checkpoint_dir %s is not on the volume at %s", config.Spark.CheckpointDir, checkpointPath)
	}
	if len(claim.Spec.AccessModes) != 1 || claim.Spec.AccessModes[0] == corev1.ReadWriteMany {
		t.Errorf("claim %s: one writer, one access mode (not ReadWriteMany)", claim.Name)
	}

	// A stop drains: the grace period covers the longest drain plus Spark's own stop.
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if drain := longestDrain(t, config); grace < drain+sparkStop {
		t.Errorf("terminationGracePeriodSeconds %v < drain_timeout %v + Spark's stop %v", grace, drain, sparkStop)
	}
}

func longestDrain(t *testing.T, config sidingConfig) time.Duration {
	t.Helper()
	var longest time.Duration
	for _, route := range config.Route {
		drain, err := time.ParseDuration(route.DrainTimeout)
		if route.DrainTimeout == "" {
			deadline := route.Deadline
			if deadline == "" {
				deadline = "30s"
			}
			drain, err = time.ParseDuration(deadline)
			drain += drainSlack
		}
		if err != nil {
			t.Fatalf("route %s: %v", route.Name, err)
		}
		longest = max(longest, drain)
	}
	if longest == 0 {
		t.Fatal("siding.toml has no route")
	}
	return longest
}

func mountedConfigMap(t *testing.T, r rendered, pod corev1.PodSpec, container corev1.Container, at string) *corev1.ConfigMap {
	t.Helper()
	volume := mountedVolume(t, pod, container, at)
	if volume.ConfigMap == nil {
		t.Fatalf("%s is not a ConfigMap volume", at)
	}
	return only[*corev1.ConfigMap](t, r, volume.ConfigMap.Name)
}

func mountedClaim(t *testing.T, r rendered, pod corev1.PodSpec, container corev1.Container, at string) *corev1.PersistentVolumeClaim {
	t.Helper()
	volume := mountedVolume(t, pod, container, at)
	if volume.PersistentVolumeClaim == nil {
		t.Fatalf("%s is not a PersistentVolumeClaim", at)
	}
	return only[*corev1.PersistentVolumeClaim](t, r, volume.PersistentVolumeClaim.ClaimName)
}

func mountedVolume(t *testing.T, pod corev1.PodSpec, container corev1.Container, at string) corev1.Volume {
	t.Helper()
	for _, mount := range container.VolumeMounts {
		if mount.MountPath != at {
			continue
		}
		for _, volume := range pod.Volumes {
			if volume.Name == mount.Name {
				return volume
			}
		}
		t.Fatalf("mount %s names no volume %s", at, mount.Name)
	}
	t.Fatalf("nothing is mounted at %s", at)
	return corev1.Volume{}
}

// containerPort resolves a probe's or Service's port (a number or a port's name).
func containerPort(t *testing.T, container corev1.Container, port intstr.IntOrString) int {
	t.Helper()
	if port.Type == intstr.Int {
		return port.IntValue()
	}
	for _, p := range container.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("the container has no port named %q", port.StrVal)
	return 0
}

func checkSelects(t *testing.T, what string, selector, podLabels map[string]string) {
	t.Helper()
	if len(selector) == 0 || !labels.SelectorFromSet(selector).Matches(labels.Set(podLabels)) {
		t.Errorf("%s does not select siding's pod (%v against %v)", what, selector, podLabels)
	}
}

var reference = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

func checkEnvironment(t *testing.T, r rendered, container corev1.Container, tomlText string) {
	t.Helper()
	given := map[string]bool{}
	for _, env := range container.Env {
		given[env.Name] = true
	}
	for _, from := range container.EnvFrom {
		if from.SecretRef == nil {
			continue
		}
		secret := only[*corev1.Secret](t, r, from.SecretRef.Name)
		for key := range secret.Data {
			given[key] = true
		}
	}
	for _, match := range reference.FindAllStringSubmatch(tomlText, -1) {
		if match[2] == "" && !given[match[1]] {
			t.Errorf("siding.toml reads ${%s}, which the container's environment does not set", match[1])
		}
	}
}

// checkMonitoring: the dashboard and the rules are the files in deploy/, not copies.
func checkMonitoring(t *testing.T, r rendered) {
	dashboard := only[*corev1.ConfigMap](t, r, "siding-grafana-dashboard")
	if dashboard.Data["siding.json"] != readRepoFile(t, "..", "grafana", "siding.json") {
		t.Errorf("the dashboard ConfigMap is not deploy/grafana/siding.json")
	}
	if dashboard.Labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap lacks the grafana_dashboard label Grafana's sidecar looks for")
	}
	rules := only[*corev1.ConfigMap](t, r, "siding-prometheus-rules")
	if rules.Data["siding-rules.yml"] != readRepoFile(t, "..", "prometheus", "siding-rules.yml") {
		t.Errorf("the rules ConfigMap is not deploy/prometheus/siding-rules.yml")
	}
}

// checkSparkOnKubernetes: the driver may create its executors, they can reach it, and they
// start from the pod template with the same image.
func checkSparkOnKubernetes(t *testing.T, r rendered) {
	deployment := only[*appsv1.Deployment](t, r, "siding")
	pod := deployment.Spec.Template.Spec
	container := pod.Containers[0]
	config := parseConfig(t, mountedConfigMap(t, r, pod, container, path.Dir(configPath)).Data["siding.toml"])
	conf := config.Spark.Conf
	if !strings.HasPrefix(config.Spark.Master, "k8s://") {
		t.Fatalf("[spark] master = %q, want k8s://...", config.Spark.Master)
	}
	if conf["spark.kubernetes.container.image"] != container.Image {
		t.Errorf("executors run %q, the driver %q: one image", conf["spark.kubernetes.container.image"], container.Image)
	}

	// RBAC: the pod's service account may manage what Spark's driver creates.
	account := only[*corev1.ServiceAccount](t, r, pod.ServiceAccountName)
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("the driver needs its service account's token")
	}
	granted := map[string]map[string]bool{}
	for _, binding := range all[*rbacv1.RoleBinding](r) {
		bound := slices.ContainsFunc(binding.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == account.Name
		})
		if !bound || binding.RoleRef.Kind != "Role" {
			continue
		}
		for _, rule := range only[*rbacv1.Role](t, r, binding.RoleRef.Name).Rules {
			if !slices.Contains(rule.APIGroups, "") {
				continue
			}
			for _, resource := range rule.Resources {
				if granted[resource] == nil {
					granted[resource] = map[string]bool{}
				}
				for _, verb := range rule.Verbs {
					granted[resource][verb] = true
				}
			}
		}
	}
	for _, resource := range []string{"pods", "services", "configmaps", "persistentvolumeclaims"} {
		for _, verb := range []string{"create", "get", "list", "watch", "delete", "deletecollection"} {
			if !granted[resource][verb] {
				t.Errorf("service account %s may not %s %s", account.Name, verb, resource)
			}
		}
	}

	// The driver's address: the headless Service, its ports those Spark listens on.
	serviceName := strings.Split(conf["spark.driver.host"], ".")[0]
	driverService := only[*corev1.Service](t, r, serviceName)
	if driverService.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s must be headless", serviceName)
	}
	checkSelects(t, "Service "+serviceName, driverService.Spec.Selector, deployment.Spec.Template.Labels)
	for _, key := range []string{"spark.driver.port", "spark.driver.blockManager.port"} {
		want, _ := strconv.Atoi(conf[key])
		found := slices.ContainsFunc(driverService.Spec.Ports, func(p corev1.ServicePort) bool {
			return int(p.Port) == want && containerPort(t, container, p.TargetPort) == want
		})
		if !found {
			t.Errorf("%s = %d: Service %s and the container must expose it", key, want, serviceName)
		}
	}
	envFromField := map[string]string{}
	for _, env := range container.Env {
		if env.ValueFrom != nil && env.ValueFrom.FieldRef != nil {
			envFromField[env.Name] = env.ValueFrom.FieldRef.FieldPath
		}
	}
	for key, field := range map[string]string{
		"spark.kubernetes.driver.pod.name": "metadata.name",
		"spark.kubernetes.namespace":       "metadata.namespace",
	} {
		name := strings.TrimSuffix(strings.TrimPrefix(conf[key], "${"), "}")
		if envFromField[name] != field {
			t.Errorf("%s = %q: want ${VAR} with VAR from the downward API's %s", key, conf[key], field)
		}
	}

	// The executors' pod template: in a mounted ConfigMap, a Pod that decodes strictly, with
	// the container Spark is told to use.
	templatePath := conf["spark.kubernetes.executor.podTemplateFile"]
	templates := mountedConfigMap(t, r, pod, container, path.Dir(templatePath))
	text, ok := templates.Data[path.Base(templatePath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", templates.Name, path.Base(templatePath))
	}
	executor, ok := decode(t, "the executor pod template", []byte(text)).(*corev1.Pod)
	if !ok {
		t.Fatalf("the executor pod template is not a Pod")
	}
	name := conf["spark.kubernetes.executor.podTemplateContainerName"]
	index := slices.IndexFunc(executor.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if index < 0 {
		t.Fatalf("the executor pod template has no container %q", name)
	}
	script := strings.Join(executor.Spec.Containers[index].Command, " ")
	if !strings.Contains(script, "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend") {
		t.Errorf("the executor's command does not start Spark's executor backend")
	}
	if sc := executor.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != imageUser {
		t.Errorf("executors must run as the image's user %d", imageUser)
	}
	fmt.Fprintf(testWriter{t}, "spark-k8s: %d objects, executor template container %q\n", len(r.objects), name)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
