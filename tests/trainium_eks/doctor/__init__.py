"""Tests of trainium_eks.doctor: every check on botocore-stubbed AWS answers."""
