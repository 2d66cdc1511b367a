// Package images builds the container images a real node of the e2e cluster
// runs, without Docker or any registry but Debian's archive, and publishes
// them to a local registry under the names upstream's runtimes use, so that
// the runtimes' pod templates pull them unchanged through containerd's
// registry mirrors.
//
// # The images
//
// Each is a [Recipe] (Go data) of Debian bookworm packages ([Suite]), except
// the sandbox image:
//
//	Pause      registry.k8s.io/pause:3.10: our own static /pause (package pause), run as 65535
//	Busybox    docker.io/library/busybox:latest and :1.36: Debian's busybox-static 1.35, applets in /bin
//	PyTorch    docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime: python3-torch, python3-sklearn
//	DeepSpeed  ghcr.io/kubeflow/trainer/deepspeed-runtime:latest: PyTorch's plus Open MPI, mpi4py, OpenSSH
//	XGBoost    ghcr.io/kubeflow/trainer/xgboost-runtime:latest: PyTorch's plus python3-xgboost
//
// They stand in for upstream's images by name, entrypoint, user, working
// directory and the paths the runtimes rely on (DeepSpeed's mpiuser, its home,
// /home/mpiuser/.sshd_config on port 2222); not by content. The frameworks
// are Debian's: PyTorch 1.13 (not 2.13), for the CPU only (gloo; no CUDA,
// no cuDNN, no NCCL), scikit-learn 1.2, XGBoost 1.7, Open MPI 4.1. The
// DeepSpeed image has no DeepSpeed, which Debian does not package: it is a
// stand-in for MPI plus torch. JAX (nvcr.io/nvidia/jax) and MLX
// (ghcr.io/kubeflow/trainer/mlx-runtime) have no Debian package and no image
// here; neither have the torchtune and initializer images.
//
// DeepSpeed and XGBoost are built on PyTorch's filesystem ([Debian].Base):
// their images are PyTorch's layer plus one layer of what their packages
// add, so the big layer is built, stored, pushed and pulled once.
//
// # Building and the cache
//
// [Build] makes root filesystems with mmdebstrap (Debian package
// "mmdebstrap", see [Packages]) from the Debian mirrors of the machine's apt
// configuration ([DebianSources]; $TRAINYARD_DEBIAN_MIRROR overrides), and
// the pause program with the go tool. mmdebstrap writes a tar to a pipe that
// becomes an uncompressed OCI layer as it is read (no gzip on either side:
// containerd takes application/vnd.oci.image.layer.v1.tar as is). Each image
// is cached as an OCI image layout in
//
//	<cache>/images/<key>-<recipe hash>/   (oci-layout, index.json, blobs/sha256/..., image.json)
//
// where <cache> is e2e/cluster's ($TRAINYARD_CACHE_DIR, else
// ~/.cache/trainyard) and the hash covers everything that shapes the image
// ([Recipe.Hash]); logs go to <cache>/images/logs/<key>.log. A folder is
// complete or absent; a lock file serialises builds between processes.
// `go run ./cmd/images list|build` shows and fills the cache.
//
// Cold builds measured on the 2-core development machine (shared with other
// builds, so wall times are upper bounds; the CPU time is the build's own):
//
//	pause       1.5 MiB    3 s
//	busybox     2.0 MiB    15 s (1 min 11 s on a loaded machine)
//	pytorch     TODO
//	deepspeed   TODO
//	xgboost     TODO
//
// # Publishing
//
// [Publish] pushes every image under each of its names' mirror paths
// ([MirrorPath]: docker.io/library/busybox:latest becomes
// <registry>/library/busybox:latest) to a registry such as the one
// e2e/cluster builds (cluster.RegistrySource), skipping the blobs it has.
package images
