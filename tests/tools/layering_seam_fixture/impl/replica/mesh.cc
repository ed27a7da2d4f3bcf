// Layering fixture: a replica file that includes the collection's header, which
// check_layers.cmake must refuse (tests/CMakeLists.txt layering_check_refuses_collection).
#include "impl/replica/mesh.h"

#include "impl/embedding/collection.h"
