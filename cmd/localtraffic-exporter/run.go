package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/collector"
	"github.com/localtraffic/localtraffic-exporter/eventwriter"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// processHooks change what is process-wide state, so only main sets them, once; in-process tests leave it
// alone, since other tests read it concurrently.
type processHooks struct {
	// routeKlog receives the exporter's logger as soon as it exists: main passes klog.SetSlogLogger, so that
	// client-go's lines (it logs through klog: reflector watch errors, throttling) come out in the same
	// handler and --log.format=json yields JSON lines only.
	routeKlog func(*slog.Logger)
	// profileMemory is told, once the flags are read, whether the heap profile will be served
	// (--web.enable-pprof). Go samples allocations for it from the start whether or not anyone reads it, and
	// its table of allocation sites alone is 1.4 MB: main turns the sampling off when nothing serves it.
	profileMemory func(served bool)
}

// runWith is the whole program: it returns when ctx ends (nil) or on the first fatal error; --help and --version
// print on stdout, as the Prometheus exporters do; logs go to stderr.
func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, hooks processHooks) error {
	opts, err := parseOptions(args, os.Getenv)
	var help errHelp
	if errors.As(err, &help) {
		fmt.Fprint(stdout, help.usage)
		return nil
	}
	if err != nil {
		return err
	}
	if opts.version {
		fmt.Fprintln(stdout, versionText())
		return nil
	}
	if opts.webConfigFile != "" {
		if err := web.Validate(opts.webConfigFile); err != nil {
			return fmt.Errorf("bad --web.config.file: %w", err)
		}
	}
	hooks.profileMemory(opts.enablePprof)
	logger := newLogger(stderr, opts.logFormat, opts.logLevel)
	hooks.routeKlog(logger)

	client, err := newKubeClient(opts.kube.Kubeconfig)
	if err != nil {
		return err
	}
	if err := checkNode(ctx, client, opts.kube.NodeName); err != nil {
		return err
	}

	viewOpts := []kubeview.Option{kubeview.WithIgnoreSelector(opts.kube.IgnoreSelector)}
	if opts.kube.Announcers {
		dyn, err := kubeview.NewDynamicClient(opts.kube.Kubeconfig, "localtraffic-exporter/"+version.Version)
		if err != nil {
			return err
		}
		viewOpts = append(viewOpts, kubeview.WithAnnouncers(announce.NewInformers(dyn, opts.kube.NodeName, opts.kube.CiliumNamespace)))
	}
	view := kubeview.New(client, opts.kube.NodeName, viewOpts...)
	var background sync.WaitGroup
	defer background.Wait() // after stopView below: nothing logs once run has returned
	viewCtx, stopView := context.WithCancel(ctx)
	defer stopView()
	view.Start(viewCtx)
	background.Add(1)
	go func() {
		defer background.Done()
		if err := view.WaitForSync(viewCtx); err == nil {
			logger.Info("informers synced")
			kubeview.ReleaseListMemory()
		}
	}()

	// The arrivals meter counts from now on, in the host's network namespace (hostNetwork), until run returns.
	var meter scrape.ArrivalsMeter
	if opts.arrivals.Enabled {
		m := arrivals.New(opts.arrivals.Meter(logger))
		defer m.Close()
		meter = m
	}
	// The state file is read once, here: what the last process carried over is restored before the model's
	// first evaluation, and the model writes the last state on the way out (below).
	state := scrape.OpenStateFile(scrape.StateFileConfig{Path: opts.scrape.StateFile, Node: opts.kube.NodeName,
		Horizon: max(opts.arrivals.QuietPeriod, opts.scrape.LossHold), Logger: logger})
	gatherer := newGathererWith(opts, view, netlinkHost{}, selectReader(opts, logger), meter, logger, state)
	// The node model keeps the verdicts current as the inputs change; scrapes render its latest State.
	model := newModel(gatherer, view, opts.rules)
	modelCtx, stopModel := context.WithCancel(context.WithoutCancel(ctx))
	modelDone := make(chan struct{})
	go func() {
		defer close(modelDone)
		model.Run(modelCtx)
	}()
	defer func() { stopModel(); <-modelDone }() // after the server stopped: the last state written, for the next process
	// The landing page shows the State the last scrape rendered.
	states := &lastState{source: model}
	exp, err := exporterFor(opts, states, logger)
	if err != nil {
		return err
	}
	metrics := newMetricsHandler(exp, opts, logger)
	// The Event writer, opt-in: off, it is not even built (no Lease, no poll, no write). On, it stands for the
	// cluster's one writer until ctx ends, and hands its Lease back on the way out.
	if opts.events.Enabled {
		writer, err := newEventWriter(opts, logger)
		if err != nil {
			return err
		}
		metrics.register(opts.kube.NodeName, writer.Collectors()...)
		writerCtx, stopWriter := context.WithCancel(ctx)
		defer stopWriter()
		background.Add(1)
		go func() {
			defer background.Done()
			writer.Run(writerCtx)
		}()
	}
	mux := http.NewServeMux()
	mux.Handle(opts.telemetryPath, metrics)
	instance, err := newInstanceID()
	if err != nil {
		return err
	}
	mux.Handle(episodesPath, &episodesHandler{node: opts.kube.NodeName, instance: instance, src: gatherer})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		for _, st := range view.Informers() {
			if !st.Synced {
				http.Error(w, st.Resource+" informer not synced", http.StatusServiceUnavailable)
				return
			}
		}
		if !model.Ready() {
			http.Error(w, "the node model has not decided from the API view yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if opts.enablePprof {
		mountPprof(mux)
	}
	if opts.telemetryPath != "/" {
		mux.Handle("/", &landingPage{node: opts.kube.NodeName, metricsPath: opts.telemetryPath, states: states,
			gatherTimeout: opts.probe.ProbeTimeout + time.Second, now: time.Now})
	}

	// Scrapes run under scrapeCtx, not ctx: SIGTERM must not cut the scrapes in flight short, only the grace
	// period's end does (shutdown below).
	scrapeCtx, endScrapes := context.WithCancel(context.WithoutCancel(ctx))
	defer endScrapes()
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return scrapeCtx }}
	listenAddrs, webConfig := opts.listenAddresses, opts.webConfigFile
	flags := &web.FlagConfig{WebListenAddresses: &listenAddrs, WebSystemdSocket: &opts.systemdSocket, WebConfigFile: &webConfig}
	serveErr := make(chan error, 1)
	go func() { serveErr <- web.ListenAndServe(server, flags, logger) }()
	logger.Info("serving", "node", opts.kube.NodeName, "addresses", listenAddrs, "version", version.Info())

	select {
	case err := <-serveErr:
		return fmt.Errorf("serving metrics: %w", err)
	case <-ctx.Done():
	}
	return shutdown(server, endScrapes, opts.shutdownGrace, logger)
}

// shutdown stops accepting scrapes and lets those in flight finish within grace. Shortly before grace ends their
// context is cancelled, so a scrape stuck on a hanging peer still answers — with timeout states — instead of
// being cut off; only a scrape that ignores that too has its connection closed. Either way the exporter has
// stopped cleanly: nil.
func shutdown(server *http.Server, endScrapes context.CancelFunc, grace time.Duration, logger *slog.Logger) error {
	logger.Info("shutting down", "grace_period", grace)
	// The margin is the time a cancelled scrape needs to write what it has.
	margin := min(grace/4, time.Second)
	cut := time.AfterFunc(grace-margin, endScrapes)
	defer cut.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := server.Shutdown(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		logger.Warn("scrapes still in flight at the end of the grace period: closing their connections", "grace_period", grace)
		_ = server.Close()
		return nil
	}
	return fmt.Errorf("shutting down: %w", err)
}

// newLogger is promslog's logger, as in node_exporter and every exporter-toolkit exporter: logfmt or JSON on
// stderr, with the same keys (time, level, source, msg). format and level were checked by parseOptions.
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	cfg := &promslog.Config{Level: promslog.NewLevel(), Format: promslog.NewFormat(), Writer: w}
	_ = cfg.Level.Set(strings.ToLower(level.String()))
	_ = cfg.Format.Set(format)
	return promslog.New(cfg)
}

// newEventWriter is the Event writer over a dynamic client of the exporter's API configuration (eventwriter.Clients
// says why not typed clients): the writer's calls (its Lease, Events, the peers' EndpointSlices, the Services'
// UIDs) are few, and none goes through the view.
func newEventWriter(opts options, logger *slog.Logger) (*eventwriter.Writer, error) {
	cfg, err := kubeview.ClientConfig(opts.kube.Kubeconfig, "localtraffic-exporter/"+version.Version)
	if err != nil {
		return nil, err
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Event writer's client: %w", err)
	}
	return eventwriter.New(opts.events, eventwriter.DynamicClients(d), logger)
}

func newKubeClient(kubeconfig string) (kubeview.API, error) {
	return kubeview.NewClient(kubeconfig, "localtraffic-exporter/"+version.Version)
}

// checkNode fails fast on a node name the API does not know: every endpoint would look remote, and every
// verdict would be wrong.
func checkNode(ctx context.Context, client kubeview.API, node string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := client.Get(ctx, kubeview.ResourceNodes, node)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("node %q does not exist in the API: check --node-name (or NODE_NAME)", node)
	}
	return fmt.Errorf("looking up node %q: %w", node, err)
}

// exporterView is what the collectors read of the API view (kubeview.View; a fake-clientset one in tests).
type exporterView interface {
	scrape.APIView
	scrape.InformerSource
}

// host is what the gatherer reads of this host itself: its addresses and its network links.
type host interface {
	nodeprobe.AddrLister
	nodeprobe.LinkLister
}

// netlinkHost reads both through netlink, in the exporter's network namespace (the host's, under hostNetwork).
type netlinkHost struct {
	nodeprobe.NetlinkAddrs
	nodeprobe.NetlinkLinks
}

// exporterFor is the selected collectors over one gatherer, filtered by the metric lists.
func exporterFor(opts options, states collector.StateSource, logger *slog.Logger) (*collector.Exporter, error) {
	sel := opts.collectors.Selection
	if sel.Enabled == nil {
		sel = collector.DefaultSelection()
	}
	cs, err := sel.Collectors()
	if err != nil {
		return nil, fmt.Errorf("choosing collectors: %w", err)
	}
	return collector.NewExporter(logger, states, cs...).WithFilter(opts.collectors.Filter), nil
}

// newModel is the node model over the gatherer's inputs, with the view's tracker: the view's events wake it.
func newModel(g *scrape.Gatherer, view *kubeview.View, rules kernelrules.Config) *scrape.Model {
	m := scrape.NewModel(g, scrape.ModelConfig{Tracker: view.NewTracker(), Node: view.Node, RulesMinInterval: rules.MinInterval,
		RulesEvery: rules.CountersInterval})
	view.OnChange(m.Notify)
	return m
}

// newGathererWith builds the per-scrape gatherer from the options; meter may be nil (not observed), and so
// may state (no state file).
func newGathererWith(opts options, view exporterView, addrs host, ruleReader scrape.DataplaneReader, meter scrape.ArrivalsMeter,
	logger *slog.Logger, state *scrape.StateFile) *scrape.Gatherer {
	client := nodeprobe.NewHTTPClient()
	// Without the flag the gatherer finds kube-proxy's health server from its /configz.
	var kpAddr func(kubeview.NodeState) (string, error)
	if opts.probe.HealthzAddress != "" {
		kpAddr = func(kubeview.NodeState) (string, error) { return opts.probe.HealthzAddress, nil }
	}
	return scrape.NewGatherer(scrape.GathererConfig{
		View: view, Informers: view, RuleReader: ruleReader, Addrs: addrs, Links: addrs,
		KubeProxyAddress: kpAddr, HealthCheckAddress: opts.probe.HealthCheckAddress,
		NodePortAddresses: opts.probe.NodePortAddresses, ConfigzURL: opts.probe.ConfigzURL(),
		ConfigzFallbackURL: opts.probe.ConfigzFallbackURL(),
		ExternalIPWindow:   opts.scrape.ExternalIPWindow, Dataplane: dataplaneOf(opts),
		Grace: opts.scrape.Grace, LossHold: opts.scrape.LossHold,
		Meter: meter, Quiet: opts.arrivals.QuietPeriod, InternalCIDRs: opts.arrivals.InternalCIDRs,
		Client: client, ProbeTimeout: opts.probe.ProbeTimeout, Concurrency: opts.probe.ProbeConcurrency,
		Logger: logger, State: state,
	})
}
