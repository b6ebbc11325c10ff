package chartcheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir = "../switchyard"
	repoRoot = "../../.."
)

// A valueSet is a way to install the chart and what it must make.
type valueSet struct {
	name   string
	values string
	kinds  []string // the objects rendered, sorted
}

var valueSets = []valueSet{
	{
		name:   "embedded",
		values: ``,
		kinds:  []string{"PodDisruptionBudget", "Service", "Service", "StatefulSet"},
	},
	{
		name: "embedded with keys",
		values: `
auth:
  adminKey: an-admin-key-of-enough-length
  hmacSecret: a-secret-of-at-least-thirty-two-bytes
  publicKeys:
    k1: "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
    k2: "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
  audience: app
extraArgs: ["--max-connections=20000", "--allowed-origins=app.example.com"]
`,
		kinds: []string{"PodDisruptionBudget", "Secret", "Service", "Service", "StatefulSet"},
	},
	{
		name: "nats",
		values: `
engine: nats
replicaCount: 3
nats: {url: "nats://nats-0.nats:4222,nats://nats-1.nats:4222", replicas: 3}
auth: {existingSecret: switchyard-keys, adminKey: set-in-the-secret, publicKeys: {k1: ""}}
serviceMonitor: {enabled: true, labels: {release: prometheus}}
`,
		kinds: []string{"Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor"},
	},
	{
		name: "ingress",
		values: `
engine: nats
nats: {url: "nats://nats:4222"}
ingress:
  enabled: true
  className: nginx
  host: ws.example.com
  tls: [{secretName: ws-tls, hosts: [ws.example.com]}]
auth: {hmacSecret: a-secret-of-at-least-thirty-two-bytes}
`,
		kinds: []string{"Deployment", "Ingress", "PodDisruptionBudget", "Secret", "Service"},
	},
	{
		name: "gateway route",
		values: `
httpRoute:
  enabled: true
  parentRefs: [{name: public, namespace: gateway-system, sectionName: https}]
  hostnames: [ws.example.com]
podDisruptionBudget: {enabled: false}
`,
		kinds: []string{"HTTPRoute", "Service", "Service", "StatefulSet"},
	},
}

// TestChart renders the chart for each value set and checks its objects.
func TestChart(t *testing.T) {
	flags := gatewayFlags(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			objs := render(t, vs.values)
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.kind)
			}
			sort.Strings(kinds)
			if !slices.Equal(kinds, vs.kinds) {
				t.Errorf("rendered %v, want %v", kinds, vs.kinds)
			}
			checkObjects(t, objs, flags)
		})
	}
}

// TestChartRefuses checks that values that cannot work fail the install
// with a message naming the value.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"memory engine", `engine: memory`, "engine"},
		{"nats without url", `engine: nats`, "nats.url is required"},
		{"route without gateway", `httpRoute: {enabled: true}`, "parentRefs"},
		{"bad extra arg", `extraArgs: ["max-connections=1"]`, "extraArgs"},
		{"too many nats replicas", `nats: {replicas: 7}`, "replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderErr(tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// An object is one rendered manifest, decoded into its API type.
type object struct {
	file, kind, name string
	obj              any
}

func render(t *testing.T, values string) []object {
	t.Helper()
	objs, err := renderErr(values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// renderErr renders the chart with values over its defaults, as `helm
// template` would (values.schema.json checked), and decodes the objects.
func renderErr(values string) ([]object, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		return nil, err
	}
	opts := chartutil.ReleaseOptions{Name: "sy", Namespace: "switchyard", Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(ch, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	files := make([]string, 0, len(out))
	for f := range out {
		files = append(files, f)
	}
	sort.Strings(files)
	var objs []object
	for _, f := range files {
		if strings.HasSuffix(f, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(out[f], "\n---") {
			o, ok, err := decode(f, doc)
			if err != nil {
				return nil, err
			}
			if ok {
				objs = append(objs, o)
			}
		}
	}
	return objs, nil
}

// decode decodes one YAML document into the API type its apiVersion and
// kind name, refusing unknown and duplicate fields.
func decode(file, doc string) (object, bool, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
		return object{}, false, fmt.Errorf("%s: %v", file, err)
	}
	if meta.Kind == "" && meta.APIVersion == "" {
		if strings.TrimSpace(stripComments(doc)) != "" {
			return object{}, false, fmt.Errorf("%s: a document without apiVersion and kind:\n%s", file, doc)
		}
		return object{}, false, nil
	}
	var obj any
	switch meta.APIVersion + " " + meta.Kind {
	case "apps/v1 StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "networking.k8s.io/v1 Ingress":
		obj = &networkingv1.Ingress{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "gateway.networking.k8s.io/v1 HTTPRoute":
		obj = &gatewayv1.HTTPRoute{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		obj = &monitoringv1.ServiceMonitor{}
	default:
		return object{}, false, fmt.Errorf("%s: unexpected %s %s", file, meta.APIVersion, meta.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		return object{}, false, fmt.Errorf("%s: %s %s: %v", file, meta.Kind, meta.Metadata.Name, err)
	}
	if meta.Metadata.Name == "" {
		return object{}, false, fmt.Errorf("%s: %s without a name", file, meta.Kind)
	}
	return object{file: file, kind: meta.Kind, name: meta.Metadata.Name, obj: obj}, true, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// flagSet is what the gateway's --help lists, and the built binary.
type flagSet struct {
	names  map[string]bool
	binary string
}

var (
	buildOnce sync.Once
	built     flagSet
	buildErr  error
)

// gatewayFlags builds the gateway once and reads its flag names off
// --help.
func gatewayFlags(t *testing.T) flagSet {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chartcheck")
		if err != nil {
			buildErr = err
			return
		}
		// The binary stays for the other tests; TestMain removes it.
		tempDirs = append(tempDirs, dir)
		bin := filepath.Join(dir, "gateway")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/gateway: %v\n%s", err, out)
			return
		}
		help, err := exec.Command(bin, "--help").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("gateway --help: %v\n%s", err, help)
			return
		}
		built = flagSet{names: parseHelp(help), binary: bin}
		if len(built.names) < 20 || !built.names["addr"] {
			buildErr = fmt.Errorf("gateway --help lists %d flags, not addr:\n%s", len(built.names), help)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

var tempDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

var helpFlag = regexp.MustCompile(`^  --([a-z0-9-]+)`)

// parseHelp returns the flag names of the gateway's --help.
func parseHelp(help []byte) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(help))
	for sc.Scan() {
		if m := helpFlag.FindStringSubmatch(sc.Text()); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

// checkObjects checks the objects of one install against each other and
// the gateway.
func checkObjects(t *testing.T, objs []object, flags flagSet) {
	byKind := map[string][]object{}
	for _, o := range objs {
		byKind[o.kind] = append(byKind[o.kind], o)
	}
	var (
		pod      corev1.PodTemplateSpec
		selector map[string]string
		claims   = map[string]bool{}
	)
	switch {
	case len(byKind["StatefulSet"]) == 1 && len(byKind["Deployment"]) == 0:
		ss := byKind["StatefulSet"][0].obj.(*appsv1.StatefulSet)
		pod, selector = ss.Spec.Template, ss.Spec.Selector.MatchLabels
		if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 1 {
			t.Errorf("StatefulSet replicas %v, want 1 (one gateway per data directory)", ss.Spec.Replicas)
		}
		for _, c := range ss.Spec.VolumeClaimTemplates {
			if c.Spec.Resources.Requests.Storage().IsZero() {
				t.Errorf("claim %s requests no storage", c.Name)
			}
			claims[c.Name] = true
		}
		if !hasService(byKind["Service"], ss.Spec.ServiceName, true) {
			t.Errorf("StatefulSet serviceName %q is no headless Service", ss.Spec.ServiceName)
		}
	case len(byKind["Deployment"]) == 1 && len(byKind["StatefulSet"]) == 0:
		d := byKind["Deployment"][0].obj.(*appsv1.Deployment)
		pod, selector = d.Spec.Template, d.Spec.Selector.MatchLabels
	default:
		t.Fatalf("want one StatefulSet or one Deployment, got %d and %d", len(byKind["StatefulSet"]), len(byKind["Deployment"]))
	}
	if !subset(selector, pod.Labels) || len(selector) == 0 {
		t.Errorf("selector %v does not select the pod's labels %v", selector, pod.Labels)
	}
	args := checkPod(t, pod.Spec, claims, byKind["Secret"], flags)
	if byKind["StatefulSet"] != nil && args["data-dir"] != "/data" {
		t.Errorf("--data-dir = %q, want the claim's mount /data", args["data-dir"])
	}
	if byKind["Deployment"] != nil && args["nats-url"] == "" {
		t.Error("engine nats without --nats-url")
	}

	var api *corev1.Service
	for _, o := range byKind["Service"] {
		s := o.obj.(*corev1.Service)
		if !subset(s.Spec.Selector, pod.Labels) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s selector %v misses the pods %v", s.Name, s.Spec.Selector, pod.Labels)
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "http" || s.Spec.Ports[0].TargetPort.String() != "http" {
			t.Errorf("Service %s ports %+v, want http to the pod's http", s.Name, s.Spec.Ports)
		}
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			api = s
		}
	}
	if api == nil {
		t.Fatal("no Service with a cluster IP")
	}
	for _, o := range byKind["PodDisruptionBudget"] {
		p := o.obj.(*policyv1.PodDisruptionBudget)
		if !subset(p.Spec.Selector.MatchLabels, pod.Labels) || p.Spec.MaxUnavailable == nil {
			t.Errorf("PodDisruptionBudget %+v", p.Spec)
		}
	}
	for _, o := range byKind["Ingress"] {
		checkIngress(t, o.obj.(*networkingv1.Ingress), api)
	}
	for _, o := range byKind["HTTPRoute"] {
		checkRoute(t, o.obj.(*gatewayv1.HTTPRoute), api)
	}
	for _, o := range byKind["ServiceMonitor"] {
		sm := o.obj.(*monitoringv1.ServiceMonitor)
		for _, s := range byKind["Service"] {
			svc := s.obj.(*corev1.Service)
			if got, want := subset(sm.Spec.Selector.MatchLabels, svc.Labels), svc == api; got != want {
				t.Errorf("ServiceMonitor selects Service %s: %v, want %v", svc.Name, got, want)
			}
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints %+v, want http /metrics", sm.Spec.Endpoints)
		}
	}
}

// checkPod checks the gateway's container and returns its flags.
func checkPod(t *testing.T, spec corev1.PodSpec, claims map[string]bool, secrets []object, flags flagSet) map[string]string {
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	args := map[string]string{}
	for _, a := range c.Args {
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("argument %q is not --flag=value", a)
			continue
		}
		if !flags.names[name] {
			t.Errorf("argument %q: the gateway has no flag --%s", a, name)
		}
		args[name] = val
	}
	// The gateway parses them all (--version exits after parsing).
	cmd := exec.Command(flags.binary, append(slices.Clone(c.Args), "--version")...)
	cmd.Env = []string{"HOME=" + os.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "switchyard gateway") {
		t.Errorf("gateway %s --version: %v\n%s", strings.Join(c.Args, " "), err, out)
	}

	if port := containerPort(c, "http"); port == 0 || args["addr"] != ":"+strconv.Itoa(port) {
		t.Errorf("--addr %q, container port http %d", args["addr"], port)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe", p.name)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || containerPort(c, g.Port.String()) == 0 {
			t.Errorf("%s probe %s on port %s, want %s on a container port", p.name, g.Path, g.Port.String(), p.path)
		}
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if d, err := time.ParseDuration(args["shutdown-timeout"]); err != nil || d >= grace {
		t.Errorf("--shutdown-timeout %q, want less than the %v grace period", args["shutdown-timeout"], grace)
	}

	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v, want non-root", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("container securityContext %+v, want a read-only root, no privilege escalation, all capabilities dropped", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want cpu and memory requests and a memory limit", c.Resources)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{} // mount path: volume
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok && !claims[m.Name] {
			t.Errorf("mount %s: no volume or claim %s", m.MountPath, m.Name)
		}
		mounts[m.MountPath] = m.Name
	}
	if mounts["/data"] != "" && !claims[mounts["/data"]] {
		t.Errorf("/data is not a volume claim")
	}
	checkKeyFiles(t, args, mounts, volumes, secrets)
	return args
}

// checkKeyFiles checks that every key file a flag names is a key of the
// Secret mounted at its directory.
func checkKeyFiles(t *testing.T, args, mounts map[string]string, volumes map[string]corev1.Volume, secrets []object) {
	var files []string
	for _, f := range []string{"admin-key-file", "jwt-hmac-secret-file"} {
		if v := args[f]; v != "" {
			files = append(files, v)
		}
	}
	for _, k := range strings.Split(args["jwt-public-key"], ",") {
		if _, file, ok := strings.Cut(k, "="); ok {
			files = append(files, file)
		} else if k != "" {
			t.Errorf("--jwt-public-key %q has no key id", k)
		}
	}
	for _, f := range files {
		v, ok := volumes[mounts[filepath.Dir(f)]]
		if !ok || v.Secret == nil {
			t.Errorf("key file %s is not in a mounted Secret", f)
			continue
		}
		if ro := v.Secret.DefaultMode; ro == nil || *ro&0o022 != 0 {
			t.Errorf("Secret %s mode %v, want no write bits", v.Secret.SecretName, ro)
		}
		var found bool
		for _, o := range secrets {
			s := o.obj.(*corev1.Secret)
			if s.Name != v.Secret.SecretName {
				continue
			}
			found = true
			if s.StringData[filepath.Base(f)] == "" {
				t.Errorf("Secret %s has no key %s", s.Name, filepath.Base(f))
			}
		}
		if !found && len(secrets) > 0 {
			t.Errorf("key file %s: Secret %s is not rendered", f, v.Secret.SecretName)
		}
	}
}

func checkIngress(t *testing.T, in *networkingv1.Ingress, api *corev1.Service) {
	for _, r := range in.Spec.Rules {
		for _, p := range r.HTTP.Paths {
			b := p.Backend.Service
			if b == nil || b.Name != api.Name || b.Port.Name != api.Spec.Ports[0].Name {
				t.Errorf("Ingress backend %+v, want Service %s port http", b, api.Name)
			}
		}
	}
	// WebSocket and SSE connections outlive a proxy's default minute.
	for _, a := range []string{"proxy-read-timeout", "proxy-send-timeout"} {
		v, _ := strconv.Atoi(in.Annotations["nginx.ingress.kubernetes.io/"+a])
		if v < 3600 {
			t.Errorf("Ingress %s = %d s, want an hour or more", a, v)
		}
	}
}

func checkRoute(t *testing.T, r *gatewayv1.HTTPRoute, api *corev1.Service) {
	if len(r.Spec.ParentRefs) == 0 {
		t.Error("HTTPRoute has no parentRefs")
	}
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if string(b.Name) != api.Name || b.Port == nil || int32(*b.Port) != api.Spec.Ports[0].Port {
				t.Errorf("HTTPRoute backend %s:%v, want %s:%d", b.Name, b.Port, api.Name, api.Spec.Ports[0].Port)
			}
		}
		// Zero disables a Gateway API timeout, as long-lived connections need.
		to := rule.Timeouts
		if to == nil || to.Request == nil || *to.Request != "0s" || to.BackendRequest == nil || *to.BackendRequest != "0s" {
			js, _ := json.Marshal(to)
			t.Errorf("HTTPRoute timeouts %s, want request and backendRequest 0s", js)
		}
	}
}

func hasService(svcs []object, name string, headless bool) bool {
	for _, o := range svcs {
		s := o.obj.(*corev1.Service)
		if s.Name == name && (s.Spec.ClusterIP == corev1.ClusterIPNone) == headless {
			return true
		}
	}
	return false
}

func containerPort(c corev1.Container, name string) int {
	for _, p := range c.Ports {
		if p.Name == name || strconv.Itoa(int(p.ContainerPort)) == name {
			return int(p.ContainerPort)
		}
	}
	return 0
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
