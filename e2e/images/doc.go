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
// Cold builds (nothing cached, every package downloaded) measured on the
// 2-core development machine while other builds ran (load 10 to 38), so wall
// times are upper bounds; CPU is mmdebstrap's and its children's:
//
//	image      size (own layer)        wall       CPU
//	pause      1.5 MiB                 3 s        (a go build)
//	busybox    2.0 MiB                 1 min 8 s  11 s (mostly apt-get update)
//	pytorch    1464 MiB (one layer)    18.5 min   5.2 min; 438 packages, 355 MB of downloads
//	deepspeed  1496 MiB (+32.7 MiB)    3.5 min    1.2 min
//	xgboost    1472 MiB (+8.0 MiB)     2.7 min    1.0 min
//
// deepspeed and xgboost build side by side once pytorch is cached: 4.2 min
// for both. On 2 idle cores the three torch images should take about 10
// minutes (5.2 + 2.2 CPU-minutes, the downloads, the unpacking), pause and
// busybox under a minute. A registry holds the three torch images in 1.5
// GiB: pytorch's layer once.
//
// # Publishing
//
// [Publish] pushes every image under each of its names' mirror paths
// ([MirrorPath]: docker.io/library/busybox:latest becomes
// <registry>/library/busybox:latest) to a registry such as the one
// e2e/cluster builds (cluster.RegistrySource), skipping the blobs it has.
package images
