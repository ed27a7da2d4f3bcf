// Layering fixture: a checkpoint file that sees the collection through the storage seam, as
// check_layers.cmake allows.
#include "impl/checkpoint/checkpoint.h"
#include "impl/embedding/storage/table_storage.h"
