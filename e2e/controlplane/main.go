// Command controlplane runs the upstream Kubernetes control-plane components that hami-py's e2e tier and its
// benchmark test against: etcd, kube-apiserver, kube-scheduler, kube-controller-manager (its resourceclaim
// controller turns a pod's ResourceClaimTemplate into a claim and frees it when the pod goes) and kubectl, each built from its published Go
// module at the version go.mod pins. Nothing here is upstream source; every subcommand is the upstream
// command's own constructor.
//
// One binary serves them all (busybox style) so that the cold build links the shared dependency graph once:
// it dispatches on the name it is started as (a link named kube-apiserver), or on its first argument
// (controlplane kube-apiserver --help).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var commands = map[string]func(args []string) int{
	"etcd": func(args []string) int {
		// etcdmain.Main reads os.Args itself, with the program name first.
		etcdmain.Main(append([]string{"etcd"}, args...))
		return 0
	},
	"kube-apiserver": func(args []string) int {
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-controller-manager": func(args []string) int {
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-scheduler": func(args []string) int {
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kubectl": func(args []string) int {
		cmd := kubectl.NewDefaultKubectlCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
}

func names() string {
	return "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl"
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	run, ok := commands[name]
	if !ok {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(os.Stderr, "usage: %s COMMAND [ARGS...]   (COMMAND: %s; or start it through a link of that name)\n", name, names())
			os.Exit(2)
		}
		run, ok = commands[args[0]]
		if !ok {
			fmt.Fprintf(os.Stderr, "%s: unknown command %q (known: %s)\n", name, args[0], names())
			os.Exit(2)
		}
		args = args[1:]
	}
	os.Exit(run(args))
}
