# Sourced by the CI scripts: toolchain paths on the project's machines.
export PATH="$HOME/.cargo/bin:/usr/local/cuda/bin:$PATH"
export CARGO_NET_OFFLINE=true
JOBS="${JOBS:-$(nproc)}"
