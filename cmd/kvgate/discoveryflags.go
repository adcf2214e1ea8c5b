package main

import (
	"flag"
	"fmt"
	"log/slog"

	"k8s.io/klog/v2"

	"github.com/kvgate/kvgate/discovery"
)

// multiValueFlags take several values after one flag name, space-separated
// as SMG takes them (see joinMultiValues), besides comma-separated or
// repeated.
var multiValueFlags = []string{"worker-urls", "decode", "selector", "prefill-selector", "decode-selector", "admin-worker-allow"}

// discoveryFlags are the Kubernetes service discovery flags, named as SMG's.
type discoveryFlags struct {
	enabled                  bool
	regular, prefill, decode listFlag
	port                     int
	namespace                string
	tls                      bool
	// client connects to the Kubernetes API; nil: discovery.NewClient (a
	// kubeconfig, else the pod's service account). Tests set a fake one.
	client func() (func(namespace string) discovery.PodClient, error)
}

func (d *discoveryFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.enabled, "service-discovery", false, "add and remove workers as Kubernetes pods matching the selectors become Ready and leave (kubeconfig from KUBECONFIG or ~/.kube/config, else the pod's service account; see deploy/kubernetes/rbac.yaml)")
	fs.Var(&d.regular, "selector", "with --service-discovery: labels of the workers' pods, key=value; a pod must carry all of them; several space-separated, comma-separated or repeated")
	fs.Var(&d.prefill, "prefill-selector", "with --service-discovery and --pd-disaggregation: labels of the prefill pods, key=value, as --selector")
	fs.Var(&d.decode, "decode-selector", "with --service-discovery and --pd-disaggregation: labels of the decode pods, key=value, as --selector")
	fs.IntVar(&d.port, "service-discovery-port", discovery.DefaultPort, "with --service-discovery: the engines' gRPC port on the pods' IPs (a pod's kvgate.io/port annotation overrides it)")
	fs.BoolVar(&d.tls, "service-discovery-tls", false, "with --service-discovery: dial the discovered engines over TLS (grpcs://POD_IP:PORT, their certificates valid for the pod IP), with the --worker-tls-* settings")
	fs.StringVar(&d.namespace, "service-discovery-namespace", "", "with --service-discovery: namespace to watch (empty: every namespace the service account may list pods in)")
}

// config is the discovery configuration, nil without --service-discovery.
func (d *discoveryFlags) config(pd bool, log *slog.Logger) (*discovery.Config, error) {
	if !d.enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{{"--selector", len(d.regular) > 0}, {"--prefill-selector", len(d.prefill) > 0}, {"--decode-selector", len(d.decode) > 0},
			{"--service-discovery-namespace", d.namespace != ""}, {"--service-discovery-tls", d.tls}, {"--service-discovery-port", d.port != discovery.DefaultPort}} {
			if f.set {
				return nil, fmt.Errorf("%s needs --service-discovery", f.name)
			}
		}
		return nil, nil
	}
	c := discovery.DefaultConfig()
	c.PD, c.Port, c.Namespace, c.TLS, c.Logger = pd, d.port, d.namespace, d.tls, log
	var err error
	for _, s := range []struct {
		flag string
		in   listFlag
		out  *map[string]string
	}{{"--selector", d.regular, &c.Regular}, {"--prefill-selector", d.prefill, &c.Prefill}, {"--decode-selector", d.decode, &c.Decode}} {
		if *s.out, err = discovery.ParseSelector(s.in); err != nil {
			return nil, fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	// The flags are checked before any Kubernetes configuration is looked
	// for, so that a mistake in them is what is reported.
	if err := c.Validate(); err != nil {
		return nil, err
	}
	newClient := d.client
	if newClient == nil {
		newClient = func() (func(string) discovery.PodClient, error) {
			pods, _, err := discovery.NewClient()
			return pods, err
		}
	}
	if c.Pods, err = newClient(); err != nil {
		return nil, fmt.Errorf("--service-discovery: %w", err)
	}
	// client-go logs through klog (a watch that fails, say); into the
	// router's log, not its own format on stderr.
	klog.SetSlogLogger(log.With("component", "client-go"))
	return &c, nil
}
