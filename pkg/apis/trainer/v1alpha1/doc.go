/*
Copyright The Trainyard Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package v1alpha1 holds the trainer.kubeflow.org/v1alpha1 API served by Trainyard:
// TrainJob, TrainingRuntime and ClusterTrainingRuntime.
//
// The types are wire-compatible with Kubeflow Trainer v2.3 (every JSON name, default,
// enum, CEL rule and immutability rule of upstream is kept), so TrainJob YAML, runtimes,
// the Kubeflow Python SDK and Kueue keep working unchanged. Trainyard adds, additively:
//
//   - PodSpecPatch.resourceClaims and ContainerPatch.resources (KEP-2782, DRA);
//   - PodGroupPolicySource.kaiScheduler (KAI Scheduler, Trainer PR 3186);
//   - PodGroupPolicySource.workload (Kubernetes Workload API, Trainer issue 3015).
//
// +k8s:deepcopy-gen=package
// +k8s:defaulter-gen=TypeMeta
// +groupName=trainer.kubeflow.org
package v1alpha1
