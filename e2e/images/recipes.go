package images

import (
	"fmt"
	"os"
)

// defaultPath is the PATH of Debian's root, as Debian's and Docker's images set it.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Pause is the pod sandbox image containerd starts first in every pod: the
// static /pause of package pause, run as nobody (65535), as Kubernetes' image is.
var Pause = &Recipe{
	Key:   "pause",
	Names: []string{"registry.k8s.io/pause:3.10"},
	Pause: true,
	Config: Config{
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
		Env:        []string{defaultPath},
	},
}

// Busybox is Debian's static busybox (1.35, under the names of 1.36 and
// latest) with a link in /bin per applet, a root and a nobody user, and
// nothing else: Docker Hub's busybox image, for test pods that run sh, sleep,
// wget and the like.
var Busybox = &Recipe{
	Key:   "busybox",
	Names: []string{"docker.io/library/busybox:latest", "docker.io/library/busybox:1.36"},
	Debian: &Debian{
		Variant:  "extract", // no dpkg database or maintainer scripts: one static binary
		Packages: []string{"busybox-static"},
		Hooks: []string{
			`chroot "$1" /bin/busybox --install -s /bin`,
			`mkdir -p "$1/root" "$1/home"`,
			`printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' > "$1/etc/passwd"`,
			`printf 'root:x:0:\nnobody:x:65534:\n' > "$1/etc/group"`,
		},
		// What mmdebstrap and the package leave besides the binary: apt's and
		// dpkg's scaffolding, documentation, initramfs hooks.
		Exclude: []string{"/etc/apt", "/etc/dpkg", "/etc/fstab", "/usr/share", "/var/cache", "/var/lib", "/var/log"},
	},
	Config: Config{Cmd: []string{"sh"}, Env: []string{defaultPath}},
}

// PyTorch stands in for the image of upstream's torch runtimes
// (pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime) with Debian's PyTorch 1.13
// for the CPU (gloo backend; no CUDA), scikit-learn (whose bundled data sets,
// digits among them, need no download), python as python3, torchrun on PATH
// (Debian ships it) and /workspace as working directory, as upstream's image
// has. Through scipy's python3-pythran, Debian's packages bring a C++
// toolchain and Boost's headers; their headers, static libraries and
// compiler internals (about 400 MB) are left out of the image: nothing runs
// a compiler in it.
var PyTorch = &Recipe{
	Key:   "pytorch",
	Names: []string{"docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"},
	Debian: &Debian{
		Variant:  "minbase",
		Packages: []string{"python3-torch", "python3-sklearn", "python-is-python3"},
		Hooks:    []string{`mkdir -p "$1/workspace"`, torchrunRedirectsFix},
		Exclude: []string{
			"/usr/include", "/usr/lib/gcc", "/usr/libexec/gcc", "/usr/bin/*-lto-dump-*",
			"/usr/lib/x86_64-linux-gnu/*.a", "/usr/lib/x86_64-linux-gnu/*/*.a",
		},
	},
	Config: torchConfig("/workspace"),
}

// torchrunRedirectsFix makes Debian's torchrun start with its defaults. Torch 1.13
// predates Python 3.11, whose IntFlag iteration skips the zero member and the
// multi-bit alias: torchrun's Std.from_str finds no member for "0" (its default
// --redirects and --tee) or "3" and returns None, and torchrun crashes with
// "'NoneType' object has no attribute 'get'". The hook returns Std(int(v)) instead
// (the value is already checked by a regular expression there), and fails the build
// when the line it edits is gone.
const torchrunRedirectsFix = `f="$1/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py"; ` +
	`sed -i '/def to_std(v):/,/for s in Std:/ s/^\( *\)v = int(v)$/\1return Std(int(v))/' "$f" && grep -q 'return Std(int(v))' "$f"`

// torchConfig is the config of the images built on [PyTorch]'s filesystem.
func torchConfig(workingDir string, env ...string) Config {
	return Config{
		Cmd:        []string{"/bin/bash"},
		Env:        append([]string{defaultPath, "LANG=C.UTF-8", "LC_ALL=C.UTF-8"}, env...),
		WorkingDir: workingDir,
	}
}

// mpiPort is where the MPI nodes' sshd listens, as in upstream's image (the
// MPI Operator's base image): the runtime probes it and the launcher's ssh
// client connects to it.
const mpiPort = "2222"

// mpiuserSSHDConfig is /home/mpiuser/.sshd_config, the file the deepspeed
// runtime starts `sshd -De -f` with, as uid 1000: the host key is the private
// key of the TrainJob's SSH Secret, mounted at /home/mpiuser/.ssh (a mounted
// Secret's modes fail sshd's strict checks), and the pid file must be
// writable by mpiuser.
const mpiuserSSHDConfig = `PidFile /home/mpiuser/sshd.pid
HostKey /home/mpiuser/.ssh/id_rsa
StrictModes no
Port ` + mpiPort + `
`

// mpiSSHConfig is the launcher's ssh client config (upstream edits
// /etc/ssh/ssh_config to the same effect): the nodes' port, no host key
// prompt, and no known_hosts writes into ~/.ssh, a read-only Secret.
const mpiSSHConfig = `Host *
    Port ` + mpiPort + `
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
`

// writeFileHook is a hook writing content to file (absolute, in the root) with mode.
func writeFileHook(file, content string, mode os.FileMode) string {
	return fmt.Sprintf(`printf '%%s' %s > "$1%s" && chmod %o "$1%s"`, shellQuote(content), file, mode, file)
}

// DeepSpeed stands in for ghcr.io/kubeflow/trainer/deepspeed-runtime with
// what its MPI runtime needs, on [PyTorch]'s filesystem: Open MPI 4.1
// (mpirun; the launcher's OMPI_MCA_orte_* variables apply), mpi4py, the SSH
// client and server, and upstream's setup: user mpiuser (uid 1000, home
// /home/mpiuser, the working directory), the sshd config above, ssh's client
// config connecting to port 2222 without host key checks or a known_hosts
// file (the .ssh folder is a read-only Secret), /run/sshd. It has no
// DeepSpeed, which Debian does not package, and no CUDA.
var DeepSpeed = &Recipe{
	Key:   "deepspeed",
	Names: []string{"ghcr.io/kubeflow/trainer/deepspeed-runtime:latest"},
	Debian: &Debian{
		Base:     PyTorch,
		Packages: []string{"openmpi-bin", "openssh-server", "openssh-client", "python3-mpi4py"},
		// sshd's privilege separation folder: not needed by the runtime's sshd
		// (uid 1000), but by one a TrainJob runs as root.
		Dirs: []string{"/run/sshd"},
		Hooks: []string{
			`chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash mpiuser`,
			writeFileHook("/home/mpiuser/.sshd_config", mpiuserSSHDConfig, 0o644),
			`mkdir -p "$1/home/mpiuser/.local/bin" "$1/home/mpiuser/.cache"`,
			`chroot "$1" chown -R mpiuser:mpiuser /home/mpiuser`,
			// Client side, for the launcher: port, no host key prompts, no writes to ~/.ssh.
			writeFileHook("/etc/ssh/ssh_config.d/trainyard-mpi.conf", mpiSSHConfig, 0o644),
			// The system sshd (not run) would listen there too; its host keys,
			// generated at install, would be one private key shared by every
			// container of the image, so they go.
			`sed -i 's/^#\?Port .*/Port ` + mpiPort + `/; s/^#\?StrictModes .*/StrictModes no/' "$1/etc/ssh/sshd_config"`,
			`rm -f "$1"/etc/ssh/ssh_host_*`,
		},
	},
	Config: func() Config {
		c := torchConfig("/home/mpiuser", "HOME=/home/mpiuser")
		c.Env[0] = "PATH=/home/mpiuser/.local/bin:" + defaultPath[len("PATH="):]
		c.ExposedPorts = []string{mpiPort + "/tcp"}
		return c
	}(),
}

// XGBoost stands in for ghcr.io/kubeflow/trainer/xgboost-runtime: Debian's
// XGBoost 1.7 (CPU) and scikit-learn on [PyTorch]'s filesystem, working
// directory /workspace as upstream's image; no CUDA.
var XGBoost = &Recipe{
	Key:   "xgboost",
	Names: []string{"ghcr.io/kubeflow/trainer/xgboost-runtime:latest"},
	Debian: &Debian{
		Base:     PyTorch,
		Packages: []string{"python3-xgboost"},
	},
	Config: torchConfig("/workspace"),
}

// Small are the images a real node needs for any pod, quick to build (about a
// minute cold): the sandbox and busybox.
var Small = []*Recipe{Pause, Busybox}

// Runtimes are the training runtimes' images, built on one PyTorch
// filesystem; see the package documentation for their cold build time.
var Runtimes = []*Recipe{PyTorch, DeepSpeed, XGBoost}

// All is every recipe of this package.
var All = append(append([]*Recipe{}, Small...), Runtimes...)

// Packages lists the Debian packages the machine that builds images needs
// beyond a Debian base system and Go: mmdebstrap, gpg (with which it finds
// the archive's signing key) and the archive's keyring. CI installs them
// with `apt-get install -y` before the e2e tests; without mmdebstrap the
// tests that build images skip.
var Packages = []string{"mmdebstrap", "gpg", "debian-archive-keyring"}
