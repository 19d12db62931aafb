package vnode

import (
	"fmt"
	"sort"

	"github.com/go-logr/logr"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
)

// vkLogger lets virtual-kubelet log through the virtual node's logr logger,
// with its fields as structured key/values. virtual-kubelet logs every pod
// sync at Info, so its Info goes to verbosity 2 and its Debug to 4; its
// Fatal logs an error and returns, since a library must not end the agent.
type vkLogger struct {
	l   logr.Logger
	err error
}

var _ vklog.Logger = vkLogger{}

func (v vkLogger) Debug(args ...any)            { v.l.V(4).Info(fmt.Sprint(args...)) }
func (v vkLogger) Debugf(f string, args ...any) { v.l.V(4).Info(fmt.Sprintf(f, args...)) }
func (v vkLogger) Info(args ...any)             { v.l.V(2).Info(fmt.Sprint(args...)) }
func (v vkLogger) Infof(f string, args ...any)  { v.l.V(2).Info(fmt.Sprintf(f, args...)) }
func (v vkLogger) Warn(args ...any)             { v.l.Info(fmt.Sprint(args...), "warning", true) }
func (v vkLogger) Warnf(f string, args ...any)  { v.l.Info(fmt.Sprintf(f, args...), "warning", true) }
func (v vkLogger) Error(args ...any)            { v.l.Error(v.cause(args), fmt.Sprint(args...)) }
func (v vkLogger) Errorf(f string, args ...any) { v.l.Error(v.err, fmt.Sprintf(f, args...)) }
func (v vkLogger) Fatal(args ...any)            { v.Error(args...) }
func (v vkLogger) Fatalf(f string, args ...any) { v.Errorf(f, args...) }

func (v vkLogger) WithField(key string, value any) vklog.Logger {
	return vkLogger{l: v.l.WithValues(key, value), err: v.err}
}

func (v vkLogger) WithFields(fields vklog.Fields) vklog.Logger {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	kv := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		kv = append(kv, k, fields[k])
	}
	return vkLogger{l: v.l.WithValues(kv...), err: v.err}
}

func (v vkLogger) WithError(err error) vklog.Logger { return vkLogger{l: v.l, err: err} }

// cause is the error to log: the one given with WithError, or the argument
// itself when virtual-kubelet logs a bare error.
func (v vkLogger) cause(args []any) error {
	if v.err != nil {
		return v.err
	}
	if len(args) == 1 {
		if err, ok := args[0].(error); ok {
			return err
		}
	}
	return nil
}
