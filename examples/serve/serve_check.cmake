# The example_serve test: trains the DLRM example briefly with --save, then serves the saved
# model and checks the AUCs against the one the training side printed (see CMakeLists.txt).
# Inputs: DLRM, SERVE (the programs) and WORK (a scratch checkpoint directory).
file(REMOVE_RECURSE ${WORK})
set(batch 64)
execute_process(
  COMMAND ${DLRM} --world 4 --shard 2 --steps 40 --batch ${batch} --report 20 --eval-every 40
          --eval-batches 4 --max-rows 20000 --seed 7 --save ${WORK}
  OUTPUT_VARIABLE train_out ERROR_VARIABLE train_err RESULT_VARIABLE rc)
message("${train_out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dlrm --save failed (${rc}): ${train_err}")
endif()
string(REGEX MATCH "held-out AUC ([0-9.eE+-]+) over ([0-9]+) samples" found "${train_out}")
if(NOT found)
  message(FATAL_ERROR "dlrm printed no saved held-out AUC")
endif()
set(auc ${CMAKE_MATCH_1})
set(samples ${CMAKE_MATCH_2})
execute_process(
  COMMAND ${SERVE} --checkpoint ${WORK} --threads 2 --batch ${batch} --samples ${samples}
          --rounds 3 --seed 7 --expect-auc ${auc}
  OUTPUT_VARIABLE serve_out ERROR_VARIABLE serve_err RESULT_VARIABLE rc)
message("${serve_out}")
file(REMOVE_RECURSE ${WORK})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "serve failed (${rc}): ${serve_err}")
endif()
message("serve check passed")
