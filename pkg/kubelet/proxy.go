package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"
)

// A self target reaches the agent's own cluster with the agent's identity,
// which then needs the streams of pods there too.
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",resources=pods/exec;pods/attach;pods/portforward,verbs=get;create

// proxy implements the kubelet API's pod handlers by calling the delegate's
// target, with the target's credentials.
type proxy struct {
	delegates *delegates
}

// find resolves the delegate again (the request was checked, but the pod
// may have moved since) and turns what is missing into virtual-kubelet's
// error kinds, which its handlers answer with.
func (p proxy) find(namespace, name string) (delegate, error) {
	d, err := p.delegates.resolve(namespace, name)
	var nf errNotFound
	if errors.As(err, &nf) {
		return d, errdefs.AsNotFound(err)
	}
	return d, err
}

// logs streams the delegate's container log.
func (p proxy) logs(ctx context.Context, namespace, name, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	d, err := p.find(namespace, name)
	if err != nil {
		return nil, err
	}
	logOpts := podLogOptions(container, opts, queryOf(ctx))
	stream, err := d.target.Client().CoreV1().Pods(d.namespace).GetLogs(d.name, logOpts).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("target %s: logs of %s/%s: %w", d.target.Name, d.namespace, d.name, err)
	}
	return stream, nil
}

// podLogOptions turns the kubelet API's log options, as virtual-kubelet
// parsed and checked them, into the API's. Its parser reads both a missing
// tailLines and tailLines=0 as 0, so the query tells them apart: --tail=0
// asks for no line, not for all.
func podLogOptions(container string, o api.ContainerLogOpts, query url.Values) *corev1.PodLogOptions {
	out := &corev1.PodLogOptions{
		Container:  container,
		Follow:     o.Follow,
		Previous:   o.Previous,
		Timestamps: o.Timestamps,
	}
	if query.Has("tailLines") {
		out.TailLines = ptrInt64(int64(o.Tail))
	}
	if o.LimitBytes > 0 {
		out.LimitBytes = ptrInt64(int64(o.LimitBytes))
	}
	if o.SinceSeconds > 0 {
		out.SinceSeconds = ptrInt64(int64(o.SinceSeconds))
	} else if !o.SinceTime.IsZero() {
		t := metav1.NewTime(o.SinceTime)
		out.SinceTime = &t
	}
	return out
}

func ptrInt64(v int64) *int64 { return &v }

// exec runs a command in the delegate's container.
func (p proxy) exec(ctx context.Context, namespace, name, container string, cmd []string, attach api.AttachIO) error {
	d, err := p.find(namespace, name)
	if err != nil {
		return err
	}
	return p.stream(ctx, d, "exec", &corev1.PodExecOptions{
		Container: container,
		Command:   cmd,
		Stdin:     attach.Stdin() != nil,
		Stdout:    attach.Stdout() != nil,
		Stderr:    attach.Stderr() != nil,
		TTY:       attach.TTY(),
	}, attach)
}

// attach attaches to the delegate's running container.
func (p proxy) attach(ctx context.Context, namespace, name, container string, attach api.AttachIO) error {
	d, err := p.find(namespace, name)
	if err != nil {
		return err
	}
	return p.stream(ctx, d, "attach", &corev1.PodAttachOptions{
		Container: container,
		Stdin:     attach.Stdin() != nil,
		Stdout:    attach.Stdout() != nil,
		Stderr:    attach.Stderr() != nil,
		TTY:       attach.TTY(),
	}, attach)
}

// stream runs exec or attach on the target as kubectl does: over websockets
// first, over SPDY when the target's API server (or a proxy in between)
// cannot upgrade to websockets.
func (p proxy) stream(ctx context.Context, d delegate, subresource string, opts runtime.Object, attach api.AttachIO) error {
	cfg := d.target.RESTConfig()
	u := d.target.Client().CoreV1().RESTClient().Post().
		Resource("pods").Namespace(d.namespace).Name(d.name).SubResource(subresource).
		VersionedParams(opts, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return fmt.Errorf("target %s: %s of %s/%s: %w", d.target.Name, subresource, d.namespace, d.name, err)
	}
	sp, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return fmt.Errorf("target %s: %s of %s/%s: %w", d.target.Name, subresource, d.namespace, d.name, err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("target %s: %s of %s/%s: %w", d.target.Name, subresource, d.namespace, d.name, err)
	}
	streamOpts := remotecommand.StreamOptions{Tty: attach.TTY()}
	// Interfaces holding nil pointers would look like streams.
	if in := attach.Stdin(); in != nil {
		streamOpts.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		streamOpts.Stdout = out
	}
	if errOut := attach.Stderr(); errOut != nil {
		streamOpts.Stderr = errOut
	}
	if attach.TTY() {
		streamOpts.TerminalSizeQueue = &sizeQueue{ctx: ctx, sizes: attach.Resize()}
	}
	klog.FromContext(ctx).V(3).Info("Proxying a stream to the delegate", "subresource", subresource, "target", d.target.Name, "pod", klog.KRef(d.namespace, d.name))
	// The error, an exit code included, goes back to the caller through
	// the kubelet API's error stream.
	return exec.StreamWithContext(ctx, streamOpts)
}

// sizeQueue hands terminal resizes of the caller to the target.
type sizeQueue struct {
	ctx   context.Context
	sizes <-chan api.TermSize
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case s, ok := <-q.sizes:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
	case <-q.ctx.Done():
		return nil
	}
}

// portForward carries one forwarded connection (one data stream of the
// caller) to the delegate's port, through the target's pods/portforward:
// one connection to the target per forwarded connection, as kubectl's
// port-forward makes one stream pair per connection.
func (p proxy) portForward(ctx context.Context, namespace, name string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	d, err := p.find(namespace, name)
	if err != nil {
		return err
	}
	conn, err := dialPortForward(d)
	if err != nil {
		return err
	}
	defer conn.Close()

	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errorStream, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("target %s: port-forward to %s/%s:%d: creating the error stream: %w", d.target.Name, d.namespace, d.name, port, err)
	}
	// Nothing is sent on the error stream.
	_ = errorStream.Close()
	remoteErr := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errorStream)
		switch {
		case err != nil:
			remoteErr <- fmt.Errorf("reading the error stream: %w", err)
		case len(msg) > 0:
			remoteErr <- fmt.Errorf("target %s: port-forward to %s/%s:%d: %s", d.target.Name, d.namespace, d.name, port, msg)
		default:
			remoteErr <- nil
		}
	}()

	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	dataStream, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("target %s: port-forward to %s/%s:%d: creating the data stream: %w", d.target.Name, d.namespace, d.name, port, err)
	}
	remoteDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(stream, dataStream)
		close(remoteDone)
	}()
	localDone := make(chan struct{})
	go func() {
		// Tell the target nothing more comes once the caller is done.
		defer dataStream.Close()
		_, _ = io.Copy(dataStream, stream)
		close(localDone)
	}()
	select {
	case <-remoteDone:
	case <-localDone:
		// The caller closed its side: wait for the delegate's answer
		// to drain, or for the request to end.
		select {
		case <-remoteDone:
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	_ = dataStream.Reset()
	select {
	case err := <-remoteErr:
		return err
	case <-time.After(streamCreationTimeout):
		return nil
	case <-ctx.Done():
		return nil
	}
}

// dialPortForward opens a port-forward connection to the delegate as
// kubectl does: SPDY over websockets first, plain SPDY when the target
// cannot upgrade.
func dialPortForward(d delegate) (httpstream.Connection, error) {
	cfg := d.target.RESTConfig()
	u := d.target.Client().CoreV1().RESTClient().Post().
		Resource("pods").Namespace(d.namespace).Name(d.name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("target %s: port-forward to %s/%s: %w", d.target.Name, d.namespace, d.name, err)
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg)
	if err != nil {
		return nil, fmt.Errorf("target %s: port-forward to %s/%s: %w", d.target.Name, d.namespace, d.name, err)
	}
	fallback := portforward.NewFallbackDialerForStreaming(tunnel, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	conn, _, err := fallback.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, fmt.Errorf("target %s: port-forward to %s/%s: %w", d.target.Name, d.namespace, d.name, err)
	}
	return conn, nil
}

type queryKey struct{}

// withQuery keeps the request's query in its context for the handlers,
// which virtual-kubelet calls with the request's context only.
func withQuery(ctx context.Context, q url.Values) context.Context {
	return context.WithValue(ctx, queryKey{}, q)
}

func queryOf(ctx context.Context) url.Values {
	q, _ := ctx.Value(queryKey{}).(url.Values)
	return q
}
