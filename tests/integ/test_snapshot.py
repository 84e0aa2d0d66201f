"""The integ app's templates against the committed snapshot (offline: synth only, no deploy)."""

from __future__ import annotations

from tests.integ.snapshot import committed, differences, normalize, synthesize


def test_given_the_integ_app_when_synthesized_then_its_templates_equal_the_committed_snapshot(tmp_path):
    diff = differences(synthesize(tmp_path), committed())
    assert not diff, f"the integ app's templates changed: review, then `make integ-snapshot`\n{diff[:8000]}"


def test_given_names_derived_from_the_training_code_when_normalized_then_only_they_are_replaced():
    files = {
        "a.template.json": '{"DefaultTrainingJobJob083018fbCDCD7533": {"name": "trn-integ-083018fb", '
        '"image": "123.dkr.ecr/repo:training-e7e41db64120ef8c", "hash": "'
        + "ab" * 32
        + '", "maxSteps": 20}}',
        "b.template.json": '{"JOB_NAME": "trn-integ-083018fb", "salt": "1796123584002"}',
        "c.template.json": '{"TrainingSubmissionManifest4335e2faF1DACB11": "trn-integ-4335e2fa", '
        '"TrainingSubmissionSubmitter4335e2fa239A7509": '
        '"{\\"annotations\\":{\\"trainium-eks/submission\\":\\"143e8e63\\"}}", "other": "143e8e63"}',
    }
    assert normalize(files) == {
        "a.template.json": '{"DefaultTrainingJobJob<digest-1>": {"name": "trn-integ-<digest-1>", '
        '"image": "123.dkr.ecr/repo:training-<image-tag>", "hash": "<asset-hash>", "maxSteps": 20}}',
        "b.template.json": '{"JOB_NAME": "trn-integ-<digest-1>", "salt": "<synth time>"}',
        "c.template.json": '{"TrainingSubmissionManifest<digest-2>": "trn-integ-<digest-2>", '
        '"TrainingSubmissionSubmitter<digest-2>": '
        '"{\\"annotations\\":{\\"trainium-eks/submission\\":\\"<submission>\\"}}", "other": "143e8e63"}',
    }
