//! The MLP's device and math options through the Rust binding.
use shardrec::{Code, DenseMath, Mlp, MlpPlacement};

#[test]
fn cuda_mlp_on_a_missing_device_is_no_device() {
    // Ordinal 1000 exists on no machine; a CPU-only build answers Code::Unsupported.
    let place = MlpPlacement {
        device_type: 1,
        device_index: 1000,
        math: DenseMath::Tf32,
    };
    let err = Mlp::new_on(3, &[4, 1], None, 7, "m", place)
        .err()
        .expect("must fail");
    assert!(
        matches!(err.code(), Code::NoDevice | Code::Unsupported),
        "{err:?}"
    );
}

#[test]
fn reduced_precision_on_the_host_is_invalid() {
    let place = MlpPlacement {
        device_type: 0,
        device_index: 0,
        math: DenseMath::Bf16,
    };
    let err = Mlp::new_on(3, &[4, 1], None, 7, "m", place)
        .err()
        .expect("must fail");
    assert_eq!(err.code(), Code::Invalid, "{err:?}");
    assert!(err.to_string().contains("SHARDREC_DEVICE_CUDA"), "{err}");
}

#[test]
fn math_codes_round_trip_and_host_default() {
    for m in [DenseMath::Fp32, DenseMath::Tf32, DenseMath::Bf16] {
        assert_eq!(DenseMath::from_code(m as i32), Some(m));
    }
    assert_eq!(DenseMath::from_code(3), None);
    assert_eq!(DenseMath::default(), DenseMath::Fp32);
    let mlp = Mlp::new_on(3, &[4, 1], None, 7, "m", MlpPlacement::default()).unwrap();
    assert_eq!(mlp.device_type(), 0);
}
