package scheduler

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	kubescheduler "k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

// quietOnDeleted keeps the scheduler from reporting on a pod deleted while
// it was being scheduled. A source deletes the candidates it did not elect
// while they wait in Permit; the framework then rejects them ("removed"),
// and kube-scheduler's failure handler would post a FailedScheduling Event
// and a PodScheduled=False status patch for each, about a pod that no
// longer exists: a warning in the target for every pod placed, and two
// requests to its API server (the patch fails, not found). The API server
// may show the deletion first as an update that sets deletionTimestamp,
// which is when the framework rejects the waiting pod: a pod in the
// informer's cache with deletionTimestamp set counts as deleted too. Any
// other pod goes through the handler unchanged.
func quietOnDeleted(sched *kubescheduler.Scheduler) {
	report := sched.FailureHandler
	sched.FailureHandler = func(ctx context.Context, f framework.Framework, podInfo *framework.QueuedPodInfo, status *fwk.Status, nominatingInfo *fwk.NominatingInfo, start time.Time) {
		pod := podInfo.Pod
		cached, err := f.SharedInformerFactory().Core().V1().Pods().Lister().Pods(pod.Namespace).Get(pod.Name)
		if !deleted(pod.UID, cached, err) {
			report(ctx, f, podInfo, status, nominatingInfo, start)
			return
		}
		// What the handler does for a pod it does not requeue, without the
		// Event and the status patch. A pod being deleted is not scheduled
		// again either way.
		defer sched.SchedulingQueue.Done(pod.UID)
		if status.IsRejected() {
			metrics.PodUnschedulable(f.ProfileName(), metrics.SinceInSeconds(start))
		} else {
			metrics.PodScheduleError(f.ProfileName(), metrics.SinceInSeconds(start))
		}
		sched.SchedulingQueue.AddNominatedPod(klog.FromContext(ctx), podInfo.PodInfo, nominatingInfo)
		klog.FromContext(ctx).V(3).Info("Pod deleted while it was being scheduled; nothing to report on it", "pod", klog.KObj(pod), "status", status.Message())
	}
}

// deleted reports whether the pod uid is gone or going, as the scheduler's
// cache shows it: cached and err are its lister's answer for the pod's name.
// Another pod of the same name is not the one that failed, but it is not
// gone either: the failure is reported as kube-scheduler would.
func deleted(uid types.UID, cached *corev1.Pod, err error) bool {
	if apierrors.IsNotFound(err) {
		return true
	}
	return err == nil && cached.UID == uid && cached.DeletionTimestamp != nil
}
