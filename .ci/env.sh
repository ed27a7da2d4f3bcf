# Sourced by the CI scripts: toolchain paths on the project's machines.
export PATH="$HOME/.cargo/bin:/usr/local/cuda/bin:$PATH"
export CARGO_NET_OFFLINE=true
JOBS="${JOBS:-$(nproc)}"
# ccache (when installed; CMakeLists.txt uses it): paths relative to the checkout so clones in
# other folders share hits, and the precompiled headers of the tests made cacheable.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
