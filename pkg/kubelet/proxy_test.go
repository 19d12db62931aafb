package kubelet

import (
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodLogOptions(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		opts  api.ContainerLogOpts
		query string
		want  corev1.PodLogOptions
	}{
		{"nothing", api.ContainerLogOpts{}, "", corev1.PodLogOptions{Container: "c"}},
		{"follow, previous, timestamps",
			api.ContainerLogOpts{Follow: true, Previous: true, Timestamps: true}, "follow=true&previous=true&timestamps=true",
			corev1.PodLogOptions{Container: "c", Follow: true, Previous: true, Timestamps: true}},
		{"tail", api.ContainerLogOpts{Tail: 1}, "tailLines=1", corev1.PodLogOptions{Container: "c", TailLines: ptrInt64(1)}},
		{"tail 0 is no line, not all", api.ContainerLogOpts{Tail: 0}, "tailLines=0", corev1.PodLogOptions{Container: "c", TailLines: ptrInt64(0)}},
		{"limit bytes", api.ContainerLogOpts{LimitBytes: 10}, "limitBytes=10", corev1.PodLogOptions{Container: "c", LimitBytes: ptrInt64(10)}},
		{"since seconds", api.ContainerLogOpts{SinceSeconds: 60}, "sinceSeconds=60", corev1.PodLogOptions{Container: "c", SinceSeconds: ptrInt64(60)}},
		{"since time", api.ContainerLogOpts{SinceTime: since}, "sinceTime=2026-01-02T03:04:05Z",
			corev1.PodLogOptions{Container: "c", SinceTime: &metav1.Time{Time: since}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got := podLogOptions("c", tc.opts, q)
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
		})
	}
}
