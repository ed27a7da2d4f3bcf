// The collection's step entries, plain and VBE (vbe.h, docs/variable-batch.md): a VBE batch is
// checked and padded here and runs through the plain pipeline (RunForward & co., collection.cc)
// with its pooled rows placed where they belong (s_.pair_rows for the call), expanded after it
// or summed before it; a sequence batch's output and gradient are re-laid out around it. Each entry
// records which VBE shape the forward runs with (vbe_source_), so the batch the backward trains
// keeps its own.
#include <cmath>

#include "impl/core/finite.h"
#include "impl/embedding/collection.h"

namespace shardrec::embedding {

namespace {

// s.pair_rows set for one call of the plain pipeline, and cleared however it returns.
class PlacedFor {
 public:
  PlacedFor(StepState* s, const PairRows* places) : s_(s) { s_->pair_rows = places; }
  ~PlacedFor() { s_->pair_rows = nullptr; }
  PlacedFor(const PlacedFor&) = delete;
  PlacedFor& operator=(const PlacedFor&) = delete;

 private:
  StepState* s_;
};

}  // namespace

Status EmbeddingCollection::RefuseVbeOnDevice() const {
  return Status::Unsupported(
      "variable batch size per feature (a VBE view) is not supported on GPU collections yet "
      "(docs/variable-batch.md); expand the batch to a plain one, or train on a host collection");
}

Status EmbeddingCollection::Forward(const Batch& batch, float* out, size_t out_len,
                                    const Status& rejected, const DeviceOutput* device_out) {
  vbe_forward_.Clear();
  vbe_source_ = &vbe_forward_;
  return RunForward(batch, out, out_len, rejected, device_out);
}

Status EmbeddingCollection::ForwardVbe(const VbeBatch& batch, float* out, size_t out_len,
                                       const Status& rejected) {
  if (pending_ != nullptr)  // RunForward's refusal, before the shape in flight is touched
    return RunForward(Batch{}, nullptr, 0, rejected, nullptr);
  Status local = rejected;
  Batch padded;
  vbe_forward_.Clear();
  if (local.ok() && !s_.options.device.is_host()) local = RefuseVbeOnDevice();
  const RouteOptions route{s_.options.bounds, s_.options.check_non_finite};
  if (local.ok()) local = vbe_forward_.Prepare(s_.layout, batch, route, &padded);
  if (local.ok() && !vbe_forward_.vbe()) {
    // A plain view in a VBE call: the plain forward.
    vbe_source_ = &vbe_forward_;
    return RunForward(padded, out, out_len, Status::Ok(), nullptr);
  }
  if (local.ok() && out_len != vbe_forward_.output_len())
    local = Status::InvalidArgument("out_len is ", out_len, " but this VBE batch's output needs ",
                                    vbe_forward_.output_len(), " floats (vbe_output_len)");
  if (local.ok() && out_len > 0 && out == nullptr)
    local = Status::InvalidArgument("out must not be NULL");
  if (!local.ok()) {
    // The rejection rides on the step's first exchange, so every rank fails alike.
    vbe_forward_.Clear();
    vbe_source_ = &vbe_forward_;
    return RunForward(Batch{}, nullptr, 0, local, nullptr);
  }
  vbe_source_ = &vbe_forward_;
  if (PairRows* places = vbe_forward_.places()) {
    // The combine writes each feature's B_f rows to their places: the caller's output, or the
    // scratch that Expand copies from. The pipeline's output check sees the padded batch's size.
    vbe_out_.resize(vbe_forward_.aux_len());
    places->aux = vbe_out_.data();
    {
      PlacedFor placed(&s_, places);
      SR_RETURN_IF_ERROR(RunForward(padded, out != nullptr ? out : &vbe_stub_,
                                    vbe_forward_.padded_len(), Status::Ok(), nullptr));
    }
    // Finish made the forward's shape the current batch's.
    vbe_current_.Expand(s_.exec, s_.layout, vbe_out_.data(), out);
    return Status::Ok();
  }
  vbe_out_.resize(vbe_forward_.padded_len());
  SR_RETURN_IF_ERROR(RunForward(padded, vbe_out_.data(), vbe_out_.size(), Status::Ok(), nullptr));
  vbe_current_.Scatter(s_.layout, vbe_out_.data(), out);
  return Status::Ok();
}

Status EmbeddingCollection::StartInputDist(const Batch& batch, const Status& rejected) {
  if (pending_ == nullptr) vbe_pending_.Clear();
  return RunStartInputDist(batch, rejected);
}

Status EmbeddingCollection::StartInputDistVbe(const VbeBatch& batch, const Status& rejected) {
  if (pending_ != nullptr) return RunStartInputDist(Batch{}, rejected);
  Status local = rejected;
  Batch padded;
  vbe_pending_.Clear();
  if (local.ok() && !s_.options.device.is_host()) local = RefuseVbeOnDevice();
  const RouteOptions route{s_.options.bounds, s_.options.check_non_finite};
  if (local.ok()) local = vbe_pending_.Prepare(s_.layout, batch, route, &padded);
  if (!local.ok()) {
    vbe_pending_.Clear();
    return RunStartInputDist(Batch{}, local);
  }
  return RunStartInputDist(padded, Status::Ok());
}

Status EmbeddingCollection::ForwardDistributed(float* out, size_t out_len, const Status& rejected,
                                               const DeviceOutput* device_out) {
  if (pending_ == nullptr || pending_work_ != nullptr || !vbe_pending_.vbe()) {
    vbe_source_ = &vbe_pending_;
    return RunForwardDistributed(out, out_len, rejected, device_out);
  }
  // The consumed batch is a VBE one: `out` has its layout.
  Status local = rejected;
  if (local.ok() && device_out != nullptr)
    local = Status::Internal("a device output for a VBE batch (host collections only)");
  if (local.ok() && out_len != vbe_pending_.output_len())
    local = Status::InvalidArgument("out_len is ", out_len,
                                    " but the started VBE batch's output needs ",
                                    vbe_pending_.output_len(), " floats (vbe_output_len)");
  if (local.ok() && out_len > 0 && out == nullptr)
    local = Status::InvalidArgument("out must not be NULL");
  vbe_source_ = &vbe_pending_;
  if (PairRows* places = vbe_pending_.places()) {
    vbe_out_.resize(vbe_pending_.aux_len());
    places->aux = vbe_out_.data();
    {
      PlacedFor placed(&s_, places);
      SR_RETURN_IF_ERROR(RunForwardDistributed(out != nullptr ? out : &vbe_stub_,
                                               vbe_pending_.padded_len(), local, nullptr));
    }
    vbe_current_.Expand(s_.exec, s_.layout, vbe_out_.data(), out);
    return Status::Ok();
  }
  vbe_out_.resize(vbe_pending_.padded_len());
  SR_RETURN_IF_ERROR(RunForwardDistributed(vbe_out_.data(), vbe_out_.size(), local, nullptr));
  vbe_current_.Scatter(s_.layout, vbe_out_.data(), out);
  return Status::Ok();
}

Status EmbeddingCollection::Backward(const float* grad, size_t grad_len, const Status& rejected,
                                     const DeviceGradient* device_grad) {
  // Only a batch the backward may train takes the VBE path; every other refusal is RunBackward's.
  const bool trains = rejected.ok() && device_grad == nullptr && !last_forward_failed_ &&
                      s_.current != nullptr && !s_.current_consumed && !current_evaluated_;
  if (trains && vbe_current_.vbe()) return BackwardVbe(grad, grad_len);
  return RunBackward(grad, grad_len, rejected, device_grad);
}

Status EmbeddingCollection::BackwardVbe(const float* grad, size_t grad_len) {
  Status local;
  const size_t need = vbe_current_.output_len();
  if (grad_len != need) {
    local = Status::InvalidArgument("grad_len is ", grad_len, " but the last forward's VBE output ",
                                    "has ", need, " elements");
  } else if (need > 0 && grad == nullptr) {
    local = Status::InvalidArgument("grad must not be NULL");
  } else if (s_.options.check_non_finite &&
             !(vbe_current_.has_inverse() && vbe_current_.places() != nullptr)) {
    // (A pooled batch with inverse indices is checked after its reduction, below.)
    const size_t i = FirstNonFinite(grad, need);
    if (i != need)
      local = Status::InvalidArgument("grad[", i, "] is ", grad[i],
                                      ": the output gradient must be finite (nothing was trained)");
  }
  if (!local.ok()) return RunBackward(nullptr, 0, local, nullptr);
  if (PairRows* places = vbe_current_.places()) {
    // The pipeline reads the caller's gradient where its rows lie; the rows of the samples that
    // read a scratch feature's bag are summed into it first (the only gradient written here).
    // With inverse indices the gradient is checked once, on what is read: the columns read in
    // place (in the walk of the sums), and the sums, which are not finite when a term is not (or
    // when they overflow).
    const bool check = s_.options.check_non_finite && vbe_current_.has_inverse();
    bool in_place_finite = true;
    vbe_grad_.resize(vbe_current_.aux_len());
    vbe_current_.Reduce(s_.exec, grad, vbe_grad_.data(), check ? &in_place_finite : nullptr);
    const size_t i = check ? FirstNonFinite(vbe_grad_.data(), vbe_grad_.size()) : vbe_grad_.size();
    if (check && (i != vbe_grad_.size() || !in_place_finite)) {
      // Name the caller's element when one is not finite, else the sum that overflowed.
      const size_t g = FirstNonFinite(grad, need);
      if (g != need)
        return RunBackward(
            nullptr, 0,
            Status::InvalidArgument("grad[", g, "] is ", grad[g],
                                    ": the output gradient must be finite (nothing was trained)"),
            nullptr);
    }
    if (i != vbe_grad_.size()) {
      int64_t f = 0;
      int64_t bag = 0;
      vbe_current_.AuxBag(i, &f, &bag);
      return RunBackward(
          nullptr, 0,
          Status::InvalidArgument("the gradient of feature '",
                                  s_.layout.plan->features[static_cast<size_t>(f)].name, "' bag ",
                                  bag, " (the sum of the rows of the samples that read it) is ",
                                  vbe_grad_[i], ": it must be finite (nothing was trained)"),
          nullptr);
    }
    places->aux = vbe_grad_.data();
    PlacedFor placed(&s_, places);
    vbe_grad_checked_ = true;
    const Status s = RunBackward(grad != nullptr ? grad : &vbe_stub_, vbe_current_.padded_len(),
                                 Status::Ok(), nullptr);
    vbe_grad_checked_ = false;
    return s;
  }
  vbe_grad_.resize(vbe_current_.padded_len());
  vbe_current_.Gather(s_.layout, grad, vbe_grad_.data());
  // Without inverse indices the reduction only copies; with them its sums may still overflow.
  vbe_grad_checked_ = s_.options.check_non_finite && !vbe_current_.has_inverse();
  const Status s = RunBackward(vbe_grad_.data(), vbe_grad_.size(), Status::Ok(), nullptr);
  vbe_grad_checked_ = false;
  return s;
}

}  // namespace shardrec::embedding
