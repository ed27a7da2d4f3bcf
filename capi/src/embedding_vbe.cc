// C API of variable batch size per feature (shardrec/embedding.h, "Variable batch size per
// feature"; the view in shardrec/tensor.h): the view converted (its version and plain part), then
// the collection's VBE entries (impl/embedding/vbe.h). As in embedding.cc, a rank whose view does
// not convert still calls into the collection with its rejection, so its peers learn of it.
#include <cstddef>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "shardrec/embedding.h"

using shardrec::Status;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;
using shardrec::capi::Handle;
using shardrec::capi::NotNull;
namespace embedding = shardrec::embedding;

namespace {

Status ToVbeBatch(const shardrec_kjt_vbe_view_t* v, embedding::VbeBatch* out) {
  SR_RETURN_IF_ERROR(shardrec::capi::CheckNotNull(v, "batch"));
  SR_RETURN_IF_ERROR(
      shardrec::capi::CheckStructVersion(v->version, SHARDREC_KJT_VBE_VIEW_VERSION, "batch"));
  SR_RETURN_IF_ERROR(shardrec::capi::ToBatch(&v->kjt, &out->kjt));
  if (out->kjt.device.is_cuda())
    return Status::Unsupported(
        "batch: a VBE view must be in host memory (kjt.device_type SHARDREC_DEVICE_HOST)");
  out->feature_batch_sizes = v->feature_batch_sizes;
  out->num_feature_batch_sizes = v->num_feature_batch_sizes;
  out->inverse = v->inverse_indices;
  out->num_inverse = v->num_inverse_indices;
  return Status::Ok();
}

}  // namespace

extern "C" {

SHARDREC_API shardrec_status_t shardrec_embedding_vbe_output_len(
    const shardrec_embedding_t* coll, const shardrec_kjt_vbe_view_t* batch, size_t* out) {
  return Enter({Handle(coll, "coll"), NotNull(batch, "batch"), NotNull(out, "out")}, [&] {
    embedding::VbeBatch b;
    SR_RETURN_IF_ERROR(ToVbeBatch(batch, &b));
    return coll->impl->VbeOutputLength(b, out);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_forward_vbe(shardrec_embedding_t* coll,
                                                              const shardrec_kjt_vbe_view_t* batch,
                                                              float* out, size_t out_len,
                                                              void* /*stream*/) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    embedding::VbeBatch b;
    const Status conv = ToVbeBatch(batch, &b);
    return coll->impl->ForwardVbe(b, out, out_len, conv);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_input_dist_start_vbe(
    shardrec_embedding_t* coll, const shardrec_kjt_vbe_view_t* batch, void* /*stream*/) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    embedding::VbeBatch b;
    const Status conv = ToVbeBatch(batch, &b);
    return coll->impl->StartInputDistVbe(b, conv);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_forward_vbe_tensor(
    shardrec_embedding_t* coll, const shardrec_kjt_vbe_view_t* batch,
    const shardrec_tensor_view_t* out, void* stream) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    embedding::VbeBatch b;
    float* data = nullptr;
    float* target = nullptr;
    size_t count = 0;
    shardrec::Device device;
    Status conv = ToVbeBatch(batch, &b);
    // A device view is staged through the host (a host collection's only way); rows of the
    // output width exist only in the plain layout, which the view's own checks enforce below.
    if (conv.ok())
      conv =
          shardrec::capi::ToFloatRows(out, coll->impl->output_dim(), "out", &data, &count, &device);
    if (conv.ok() && out->ndim >= 2 && b.feature_batch_sizes != nullptr && b.inverse == nullptr &&
        !coll->impl->sequence())
      conv = Status::InvalidArgument(
          "out: a VBE batch without inverse indices has a feature-major output (rows of each "
          "feature's own width): give a 1-D view");
    if (conv.ok()) conv = coll->staging.OutputTarget(device, data, count, &target);
    SR_RETURN_IF_ERROR(coll->impl->ForwardVbe(b, target, count, conv));
    return coll->staging.FinishOutput(device, data, count, stream, coll->impl->comm().timeout());
  });
}

}  // extern "C"
