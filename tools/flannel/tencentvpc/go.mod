// A stand-in for the Tencent Cloud VPC SDK, which the module proxy does
// not serve: flannel's tencent-vpc backend compiles against it and fails
// at run time. kcompile never selects that backend.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.26.0
