// C API of an embedding collection's training / evaluation mode (shardrec/embedding.h,
// "Evaluation mode").
#include <cstdint>

#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "shardrec/embedding.h"

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_embedding_set_training(shardrec_embedding_t* coll,
                                                               int32_t training) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    if (training != 0 && training != 1)
      return Status::InvalidArgument("training is ", training, "; it must be 1 (train) or 0 ",
                                     "(evaluate)");
    return coll->impl->SetTraining(training == 1);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_is_training(const shardrec_embedding_t* coll,
                                                              int32_t* training) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(training, "training"));
    *training = coll->impl->training() ? 1 : 0;
    return Status::Ok();
  });
}

}  // extern "C"
